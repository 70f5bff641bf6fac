"""Run a SQL query (DuckDB) over a profile's tables."""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from .base import Command
from .common import add_format, open_for_analysis


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

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory, a folder of profiles, or a quoted glob")
        parser.add_argument("query", help="the SQL query")
        add_format(parser)

    def run(self, args: argparse.Namespace) -> int:
        import duckdb

        from ..render.tables import render
        from ..render.terminal import console
        from ..store import db
        from ..store.fleet import is_fleet, open_fleet

        if is_fleet(args.profile):
            con, profiles, unfinished = open_fleet(args.profile)
            if unfinished:
                print(f"dlscope: left out {len(unfinished)} unfinished recording(s) (finalize each with "
                      f"'dlscope summary PATH'): {', '.join(map(str, unfinished[:3]))}"
                      f"{' ...' if len(unfinished) > 3 else ''}", file=sys.stderr)
        else:
            con = open_for_analysis(args.profile).con
        try:
            table = db.query_arrow(con, args.query)
        except duckdb.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
            raise UsageError(f"query failed: {first}") from None
        render(table, args.format, console())
        return 0
