"""The profile format's name and version (kept apart from schema.py so that recording, which
writes meta information, never imports pyarrow into the profiled program)."""

FORMAT_NAME = "dlscope-profile"
FORMAT_VERSION = 1
