"""What a command is: a name, a one-line help, its arguments, and run() -> exit code."""

from __future__ import annotations

import argparse
from typing import ClassVar, NoReturn

from ..errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line (raised, printed by main) instead of usage+exit."""

    def error(self, message: str) -> NoReturn:
        # main() prints "dlscope: " before the message: name only the subcommand here
        sub = self.prog.removeprefix("dlscope").strip()
        raise UsageError(f"{sub + ': ' if sub else ''}{message} (see '{self.prog} --help')")


class Command:
    """Base of every subcommand. ``help`` is the first line of the class docstring."""

    name: ClassVar[str] = ""
    # False for commands that run the user's code: it may need pandas (see no_pandas)
    without_pandas: ClassVar[bool] = True
    # True for commands that open a stored profile: its database starts while they import (open.warm_up)
    opens_profile: ClassVar[bool] = False

    @classmethod
    def help(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0]

    @classmethod
    def description(cls) -> str:
        return (cls.__doc__ or "").strip()

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        pass

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError
