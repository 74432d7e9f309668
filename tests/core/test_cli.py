"""The one CLI helper: usage errors exit 2 with the usage and one line, and every CLI parses with it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from specsteer.core.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Parser, number, reported, whole_number
from specsteer.core.errors import ConfigError


def test_a_usage_error_exits_2_with_the_usage_and_one_sentence(capsys) -> None:
    parser = Parser(prog="tool")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run = sub.add_parser("run")
    run.add_argument("--count", type=int, required=True)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["run", "--count", "many"])
    assert exc.value.code == EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: tool run")
    assert err.rstrip().splitlines()[-1] == "tool run: error: argument --count: invalid int value: 'many'"


def test_the_exit_statuses_a_shell_sees() -> None:
    # What `reported` returns is the process's status: 0, 1 for our errors, 130 as shells report Ctrl-C.
    def fails() -> int:
        raise ConfigError("the widget is missing")

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert [reported("tool", f) for f in (lambda: 0, fails, interrupted)] == [0, 1, 130]


def test_a_whole_number_option(capsys) -> None:
    parser = Parser(prog="tool")
    parser.add_argument("--count", type=whole_number(1))
    assert parser.parse_args(["--count", "3"]).count == 3
    for value, message in (("0", "must be at least 1: 0"), ("x", "not a whole number: 'x'")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--count", value])
        assert exc.value.code == EXIT_USAGE
        assert capsys.readouterr().err.rstrip().endswith(f"argument --count: {message}")


def test_a_number_option_refuses_nan_and_unasked_infinity_in_one_line(capsys) -> None:
    parser = Parser(prog="tool")
    parser.add_argument("--rate", type=number(positive=True))
    parser.add_argument("--threshold", type=number(infinity=True))
    args = parser.parse_args(["--rate", "0.5", "--threshold", "inf"])
    assert (args.rate, args.threshold) == (0.5, float("inf"))
    for option, value, message in (
        ("--rate", "nan", "not a number: 'nan'"),
        ("--rate", "inf", "must be a finite number: 'inf'"),
        ("--rate", "0", "must be a positive number: '0'"),
        ("--rate", "fast", "not a number: 'fast'"),
        ("--threshold", "-inf", "must be a finite number or inf: '-inf'"),
    ):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([f"{option}={value}"])
        assert exc.value.code == EXIT_USAGE
        # One line: the usage would only bury which option is wrong.
        assert capsys.readouterr().err == f"tool: error: argument {option}: {message}\n"


def test_abbreviated_options_are_refused(capsys) -> None:
    parser = Parser(prog="tool")
    parser.add_argument("--max-new-tokens", type=int)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--max-new-token", "3"])
    assert exc.value.code == EXIT_USAGE
    assert "unrecognized arguments: --max-new-token 3" in capsys.readouterr().err


def test_a_command_reports_our_errors_and_ctrl_c_in_one_line(capsys) -> None:
    assert reported("tool", lambda: 0) == EXIT_OK

    def fails() -> int:
        raise ConfigError("the widget is missing")

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert reported("tool", fails) == EXIT_ERROR
    assert capsys.readouterr().err == "tool: error: the widget is missing\n"
    assert reported("tool", interrupted) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "tool: interrupted\n"
    with pytest.raises(ValueError):  # a bug is no user error: it keeps its traceback
        reported("tool", lambda: int("x"))


# Per CLI, a command with an option spelled as a prefix of a real one. argparse's own parser would
# take the prefix (and run the command: each points at a missing path, so it would fail fast).
ABBREVIATED = {
    "sdk": ["generate", "--prompt", "hi", "--specialist", "MISSING", "--max-new-token", "3"],
    "server": ["serve", "--conf", "MISSING"],
    "audit": ["verify", "MISSING", "--jso"],
    "privacy": ["budget", "--state-di", "MISSING"],
    "federation": ["status", "--state-di", "MISSING"],
}


@pytest.mark.parametrize("prog", ABBREVIATED)
def test_every_cli_parses_with_the_shared_parser(prog: str, tmp_path: Path, capsys) -> None:
    main = importlib.import_module(f"{prog}.cli").main
    argv = [str(tmp_path / "missing") if a == "MISSING" else a for a in ABBREVIATED[prog]]
    for args, error in ((["--vers"], "the following arguments are required"), (argv, "unrecognized arguments")):
        # The top-level parser (argparse's would print the --version), then a command's.
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == EXIT_USAGE, args
        err = capsys.readouterr().err
        assert err.startswith(f"usage: {prog}"), err
        assert err.rstrip().splitlines()[-1].startswith(f"{prog}: error: {error}"), err
