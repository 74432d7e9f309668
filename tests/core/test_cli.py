"""The one CLI helper: usage errors exit 2 with the usage and one line, and no CLI keeps its own copy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Parser, reported, whole_number
from core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CLIS = ["sdk/cli.py", "server/cli.py", "audit/cli.py", "privacy/cli.py", "federation/cli.py"]


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


def test_the_exit_codes() -> None:
    assert (EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED) == (0, 1, 2, 130)


def test_a_whole_number_option(capsys) -> None:
    parser = Parser(prog="tool")
    parser.add_argument("--count", type=whole_number(1))
    assert parser.parse_args(["--count", "3"]).count == 3
    for value, message in (("0", "must be at least 1: 0"), ("x", "not a whole number: 'x'")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--count", value])
        assert exc.value.code == EXIT_USAGE
        assert capsys.readouterr().err.rstrip().endswith(f"argument --count: {message}")


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


@pytest.mark.parametrize("path", CLIS)
def test_no_cli_defines_its_own_parser_or_exit_codes(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    own: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Attribute) and b.attr == "ArgumentParser" for b in node.bases
        ):
            own.append(f"class {node.name}")
        if isinstance(node, ast.Assign):
            own += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("EXIT_")]
    assert not own, f"{path} defines {own}; use core.cli"
