"""The one CLI helper: usage errors exit 2 with the usage and one line, and no CLI keeps its own copy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Parser

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
    assert (EXIT_OK, EXIT_ERROR, EXIT_USAGE) == (0, 1, 2)


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
