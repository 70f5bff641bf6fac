"""Import traces other tools wrote (PyTorch/Kineto, Nsight Systems ...) into a profile."""

from __future__ import annotations

import argparse
import sys

from .base import Command


class ImportCommand(Command):
    """Import traces other tools wrote (PyTorch/Kineto, Nsight Systems ...) into a profile.

    dlscope import TRACE [TRACE ...] -o OUT.dlscope. A directory is searched for trace files
    (a tensorboard_trace_handler folder, one file per rank). The format of each file is
    recognized from its content.
    """

    name = "import"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("inputs", nargs="+", metavar="TRACE", help="trace files or directories")
        parser.add_argument("-o", "--output", required=True, metavar="OUT.dlscope", help="profile to write")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing profile")
        parser.add_argument("--key-node", metavar="NAME", help="a range or op whose instances mark iterations")
        parser.add_argument("--rank", type=int, metavar="N", help="rank of every input (default: from the file)")
        from ..application.import_traces import formats

        parser.epilog = "formats: " + "; ".join(formats())

    def run(self, args: argparse.Namespace) -> int:
        from ..application.import_traces import import_traces
        from ..importers.base import ImportOptions
        from ..render.progress import progress

        with progress("importing") as bar:
            out = import_traces(
                args.inputs,
                args.output,
                ImportOptions(key_node=args.key_node, rank=args.rank, progress=bar),
                force=args.force,
            )
        print(f"dlscope: imported {len(args.inputs)} input(s) into {out}", file=sys.stderr)
        return 0
