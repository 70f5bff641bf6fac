"""The use cases (layer 6 of the house, docs/DEVELOPING.md): profile, import, report, advise, diff,
check, try, ncu, merge and open, one function or class each, and reading a fleet of profiles
(:mod:`.fleet_dask`). The only layer that strings store, capture, importers, analysis, advice and
render together; the front doors (cli, the notebook API, the integrations) stay thin over it: they
parse what they are given, call a use case, and hand its result to ``dlscope.render``."""
