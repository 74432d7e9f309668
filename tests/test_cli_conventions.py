"""What every command line owes its user: `--version`, help on every option, no silent
abbreviations, and one line for a number that is not one.

The walk covers every subcommand of the five console scripts (`sdk demo` is parsed by `sdk`'s parser).
"""

from __future__ import annotations

import argparse
import math
import tomllib
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from demo.cli import build_parser as demo_parser
from specsteer.audit.cli import build_parser as audit_parser
from specsteer.audit.cli import main as audit_main
from specsteer.core.cli import EXIT_USAGE
from specsteer.federation.cli import build_parser as federation_parser
from specsteer.federation.cli import main as federation_main
from specsteer.privacy.cli import build_parser as privacy_parser
from specsteer.privacy.cli import main as privacy_main
from specsteer.sdk.cli import build_parser as sdk_parser
from specsteer.sdk.cli import main as sdk_main
from specsteer.server.cli import build_parser as server_parser
from specsteer.server.cli import main as server_main

ROOT = Path(__file__).resolve().parents[1]
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "sdk": sdk_parser,
    "server": server_parser,
    "audit": audit_parser,
    "privacy": privacy_parser,
    "federation": federation_parser,
}
MAINS: dict[str, Callable[[list[str]], int]] = {
    "sdk": sdk_main,
    "server": server_main,
    "audit": audit_main,
    "privacy": privacy_main,
    "federation": federation_main,
}
# Options whose value may be infinite on purpose: `--gamma inf` rejects every draft.
INFINITY_ALLOWED = {("sdk generate", "--gamma"), ("python -m demo", "--gamma")}


def every_parser() -> Iterator[argparse.ArgumentParser]:
    """Each command's parser and, recursively, its subcommands' parsers."""
    todo = [build() for build in PARSERS.values()] + [demo_parser()]  # and the repository's demo
    while todo:
        parser = todo.pop()
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())


def every_option() -> Iterator[tuple[str, argparse.Action]]:
    for parser in every_parser():
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                yield parser.prog, action


def name(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else action.metavar or action.dest


def installed_version() -> str:
    try:
        return version("specsteer-sdk")
    except PackageNotFoundError:
        return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def test_the_walk_reaches_every_subcommand() -> None:
    progs = {p.prog for p in every_parser()}
    assert {
        "sdk generate",
        "sdk models build",
        "server serve",
        "server pki rotate-server",
        "audit prove-inclusion",
    } <= progs
    assert {"privacy seal", "federation schedule", "federation status"} <= progs


@pytest.mark.parametrize("command", sorted(MAINS))
def test_every_command_prints_its_version(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        MAINS[command](["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"{command} {installed_version()}\n"


def test_every_option_and_argument_has_help() -> None:
    bare = [f"{prog} {name(action)}" for prog, action in every_option() if not (action.help or "").strip()]
    assert not bare, f"options without help text: {bare}"


def test_no_parser_takes_an_abbreviation() -> None:
    lenient = [p.prog for p in every_parser() if p.allow_abbrev]
    assert not lenient, f"parsers that accept a prefix of an option: {lenient}"


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("sdk", ["generate", "--prompt", "Hi", "--max-new-token", "3"]),
        ("server", ["serve", "--max-session", "3"]),
        ("audit", ["prove-inclusion", "log", "--ind", "3"]),
        ("federation", ["run", "--simulation", "--round", "2"]),
    ],
)
def test_a_prefix_of_an_option_is_refused(command: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        MAINS[command](argv)
    assert exc.value.code == EXIT_USAGE
    assert "unrecognized arguments" in capsys.readouterr().err


def test_no_option_takes_nan_or_an_unintended_infinity() -> None:
    typed = [(prog, action) for prog, action in every_option() if callable(action.type)]
    assert any(name(a) == "--gamma" for _, a in typed)  # the walk does see the number options
    for prog, action in typed:
        for text in ("nan", "NaN", "inf", "-inf"):
            try:
                value = action.type(text)  # type: ignore[misc]
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
            if not isinstance(value, float):
                continue  # a path or a name called "nan" is fine
            assert not math.isnan(value), f"{prog} {name(action)} takes {text}"
            if math.isinf(value):
                assert value > 0 and (prog, name(action)) in INFINITY_ALLOWED, f"{prog} {name(action)} takes {text}"


@pytest.mark.parametrize(
    ("command", "argv", "message"),
    [
        (
            "sdk",
            ["generate", "--prompt", "Hi", "--gamma", "nan"],
            "sdk generate: error: argument --gamma: not a number",
        ),
        ("sdk", ["generate", "--prompt", "Hi", "--alpha", "inf"], "argument --alpha: must be a finite number: 'inf'"),
        (
            "sdk",
            ["generate", "--prompt", "Hi", "--temperature=-inf"],
            "argument --temperature: must be a finite number",
        ),
        ("server", ["serve", "--idle-timeout", "nan"], "server serve: error: argument --idle-timeout: not a number"),
        ("federation", ["run", "--simulation", "--epsilon", "inf"], "argument --epsilon: must be a finite number"),
    ],
)
def test_a_non_finite_number_is_one_line_and_exit_2(
    command: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        MAINS[command](argv)
    assert exc.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_gamma_inf_still_means_reject_every_draft() -> None:
    args = sdk_parser().parse_args(["generate", "--prompt", "Hi", "--gamma", "inf"])
    assert args.gamma == math.inf


def test_a_wrong_command_shape_still_shows_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sdk_main(["generate"])
    assert exc.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: sdk generate") and "the following arguments are required: --prompt" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["specsteer.sdk", "models", "verify", "{root}/conformance"],  # an error: stderr, exit 1
        ["specsteer.federation", "status", "--state-dir", "{tmp}"],
        ["specsteer.server", "pki", "init", "--dir", "{tmp}/pki"],
    ],
)
def test_a_reader_that_closed_stdout_ends_any_command_quietly(argv: list[str], tmp_path: Path) -> None:
    """`COMMAND | head -1` where the reader has gone: no traceback, and exit 141 (128 + SIGPIPE) for a
    command that wrote to stdout, never 1, which says the command failed."""
    import os
    import subprocess
    import sys

    words = [a.format(root=ROOT, tmp=tmp_path) for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", *words], cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr, proc.stderr
    wrote_nothing = words[1:3] == ["models", "verify"]
    assert proc.returncode == (1 if wrote_nothing else 141), proc.stderr
