"""What every command line shares: the exit codes and an argparse parser that exits 2 on misuse.

The five CLIs (`sdk`, `server`, `audit`, `privacy`, `federation`) print a failure as one sentence
and exit 1; a usage error (unknown option, missing argument, bad value) prints the usage and exits
2, as POSIX tools do. argparse alone would also exit 2, but through `sys.exit` from deep inside
`parse_args`; `Parser` makes that explicit and keeps the message format in one place.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from core.errors import SpecSteerError

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNPROVEN",
    "EXIT_USAGE",
    "Parser",
    "reported",
    "whole_number",
]

EXIT_OK = 0
EXIT_ERROR = 1  # the command could not do what was asked; stderr says why in one sentence
EXIT_FAILED = EXIT_ERROR  # `audit verify`: a check failed (the report says which)
EXIT_USAGE = 2  # the command line itself is wrong
EXIT_UNPROVEN = 3  # `audit verify` without a key: every check passed, but authenticity is unproven
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a command ended by SIGINT


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors print the usage and `PROG: error: MESSAGE`, then exit 2.

    Pass it as `parser_class` to `add_subparsers` so subcommands behave the same.
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse `type`: a whole number of at least `minimum` (a usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {value}")
        return value

    return parse


def reported(prog: str, command: Callable[[], int]) -> int:
    """`command()`'s exit code; a `SpecSteerError` is printed as one sentence `PROG: error: MESSAGE`
    (exit 1) and Ctrl-C as `PROG: interrupted` (exit 130), never as a traceback."""
    try:
        return command()
    except SpecSteerError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
