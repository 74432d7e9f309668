"""What every command line shares: the exit codes, the parser, and the number types of options.

The five CLIs (`sdk`, `server`, `audit`, `privacy`, `federation`) print a failure as one sentence
and exit 1; a usage error (unknown option, missing argument, bad value) exits 2, as POSIX tools do.
A wrong command shape prints the usage first; a value one of the types below refuses (`--gamma nan`)
prints only the line naming the option, since the usage of a command with thirty options would bury
it. argparse alone would also exit 2, but through `sys.exit` from deep inside `parse_args`; `Parser`
makes that explicit and keeps the message format in one place.

Every parser refuses abbreviated options (`--max-new-token` is not `--max-new-tokens`): a prefix
that happens to match today can mean another option tomorrow. `command_parser` adds `--version`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from specsteer.core.errors import SpecSteerError
from specsteer.core.version import __version__

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNPROVEN",
    "EXIT_USAGE",
    "Parser",
    "add_quiet",
    "bad_value",
    "command_parser",
    "finite_float",
    "number",
    "reported",
    "whole_number",
]

EXIT_OK = 0
EXIT_ERROR = 1  # the command could not do what was asked; stderr says why in one sentence
EXIT_FAILED = EXIT_ERROR  # `audit verify`: a check failed (the report says which)
EXIT_USAGE = 2  # the command line itself is wrong
EXIT_UNPROVEN = 3  # `audit verify` without a key: every check passed, but authenticity is unproven
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a command ended by SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE (13): the reader closed stdout (`... | head`), no failure of ours


class _BadValue(argparse.ArgumentTypeError):
    """An option's value that a `type` below refused: reported in one line, without the usage.

    An argparse signal, never raised past `parse_args` (so no `SpecSteerError`): make one with `bad_value`.
    """


def bad_value(message: str) -> argparse.ArgumentTypeError:
    """What an argparse `type` raises to refuse a value in one line: `argument --opt: MESSAGE`."""
    return _BadValue(message)


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors print `PROG: error: MESSAGE` and exit 2, with the usage
    before it unless the error is a value a type refused with `bad_value`. Abbreviations are refused.

    Pass it as `parser_class` to `add_subparsers` so subcommands behave the same.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._bad_value = False

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        self._bad_value = False
        return super().parse_known_args(*args, **kwargs)

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            # argparse re-raises the type's error as an ArgumentError naming the option; the cause
            # survives only as its context.
            self._bad_value = isinstance(exc.__context__, _BadValue)
            raise

    def error(self, message: str) -> NoReturn:
        if not self._bad_value:
            self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def add_quiet(parser: argparse.ArgumentParser, silenced: str) -> None:
    """`--quiet` on a command: `silenced` (its progress and notes on stderr) stays off; warnings and
    the one-sentence errors still print (`core.logs.configure_cli_logging(quiet=...)`)."""
    parser.add_argument("--quiet", action="store_true", help=f"no {silenced} on stderr: warnings and errors only")


def command_parser(prog: str, description: str) -> Parser:
    """The top-level parser of command `prog`, with `--version` (the distribution's version)."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}", help="print the version")
    return parser


def whole_number(minimum: int | None = None) -> Callable[[str], int]:
    """An argparse `type`: a whole number, of at least `minimum` if given (a usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise bad_value(f"not a whole number: {text!r}") from None
        if minimum is not None and value < minimum:
            raise bad_value(f"must be at least {minimum}: {value}")
        return value

    return parse


def number(*, positive: bool = False, infinity: bool = False) -> Callable[[str], float]:
    """An argparse `type`: a finite real number (positive, if asked); `infinity` also lets `inf` through.

    NaN is always refused: every comparison with it is false, so it would slip past range checks.
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise bad_value(f"not a number: {text!r}") from None
        if math.isnan(value):
            raise bad_value(f"not a number: {text!r}")
        if math.isinf(value) and not (infinity and value > 0):
            raise bad_value(f"must be a finite number{' or inf' if infinity else ''}: {text!r}")
        if positive and not value > 0:
            raise bad_value(f"must be a positive number: {text!r}")
        return value

    return parse


finite_float = number()


def reported(prog: str, command: Callable[[], int]) -> int:
    """`command()`'s exit code; a `SpecSteerError` is printed as one sentence `PROG: error: MESSAGE`
    (exit 1), Ctrl-C as `PROG: interrupted` (exit 130) and a reader that closed stdout ends the
    command quietly (exit 141), never as a traceback."""
    try:
        code = command()
        sys.stdout.flush()  # a reader gone away (`sdk generate ... | head -1`) shows here, not at exit
        return code
    except BrokenPipeError:
        return stdout_closed()
    except SpecSteerError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def stdout_closed() -> int:
    """The exit status of a command whose reader closed its stdout, quietly, as if killed by SIGPIPE.

    Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError instead of ending the
    process; left alone it would read as exit 1 (an error) with a traceback. The output still
    buffered goes to /dev/null, so flushing it at exit cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout is no file descriptor (captured in-process): nothing is left to flush there
    return EXIT_BROKEN_PIPE
