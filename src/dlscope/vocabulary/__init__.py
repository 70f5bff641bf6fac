"""The vocabulary every layer shares (layer 0 of the house, docs/DEVELOPING.md): the version, names
(the communication-op patterns in :mod:`.collectives`), units and enums. Modules here import only the
standard library and each other; importing this package loads nothing else."""
