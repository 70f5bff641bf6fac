"""Run a SQL query (DuckDB) over a profile's tables."""

from __future__ import annotations

import argparse
import sys

from .base import Command
from .common import add_format


class SqlCommand(Command):
    """Run a SQL query (DuckDB) over a profile's tables, or over many profiles at once.

    Every table is a view with decoded names (phases, steps, ops, api, kernels, memcpy, memset,
    sync, counters, kernel_metrics, strings); raw_<table> has only the ids. Times are ns since the Unix epoch.
    Example: dlscope sql run.dlscope "select name, count(*), sum(end_ns-start_ns)/1e6 as ms
    from kernels group by name order by ms desc limit 10". Given a folder of profiles or a
    quoted glob ('runs/*.dlscope'), every table holds the rows of all of them with a 'profile'
    column (the profile's path), and the table 'profiles' lists them.
    """

    name = "sql"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory, a folder of profiles, or a quoted glob")
        parser.add_argument("query", help="the SQL query")
        add_format(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..application.sql import open_tables, query
        from ..render.tables import render
        from ..render.terminal import console

        tables = open_tables(args.profile)
        if tables.unfinished:
            n = len(tables.unfinished)
            print(
                f"dlscope: left out {n} unfinished recording(s) (finalize each with 'dlscope summary PATH'): "
                f"{', '.join(map(str, tables.unfinished[:3]))}{' ...' if n > 3 else ''}",
                file=sys.stderr,
            )
        render(query(tables, args.query), args.format, console())
        return 0
