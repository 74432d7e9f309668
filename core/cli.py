"""What every command line shares: the exit codes and an argparse parser that exits 2 on misuse.

The five CLIs (`sdk`, `server`, `audit`, `privacy`, `federation`) print a failure as one sentence
and exit 1; a usage error (unknown option, missing argument, bad value) prints the usage and exits
2, as POSIX tools do. argparse alone would also exit 2, but through `sys.exit` from deep inside
`parse_args`; `Parser` makes that explicit and keeps the message format in one place.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["EXIT_ERROR", "EXIT_FAILED", "EXIT_OK", "EXIT_UNPROVEN", "EXIT_USAGE", "Parser"]

EXIT_OK = 0
EXIT_ERROR = 1  # the command could not do what was asked; stderr says why in one sentence
EXIT_FAILED = EXIT_ERROR  # `audit verify`: a check failed (the report says which)
EXIT_USAGE = 2  # the command line itself is wrong
EXIT_UNPROVEN = 3  # `audit verify` without a key: every check passed, but authenticity is unproven


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors print the usage and `PROG: error: MESSAGE`, then exit 2.

    Pass it as `parser_class` to `add_subparsers` so subcommands behave the same.
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")
