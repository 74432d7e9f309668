"""Every command line the README shows still parses: a drift between the docs and a CLI fails here.

Each line of the README's ```sh blocks that runs one of our commands is resolved against that
command's real argparse parser (subcommand by subcommand): every subcommand must exist, every
`--option` must be one the parser knows, and where the README spells a choice (`--method a|b`)
each choice must be one the option accepts. `python -m bench.X` lines are held to that module's
`--help`, `make X` lines to the Makefile's targets, and pinned packages in `pip install` lines to
the pins the Makefile and pyproject.toml install.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# The console scripts of pyproject.toml and the module that builds each one's parser.
PARSERS: dict[str, str] = {
    "sdk": "specsteer.sdk.cli",
    "server": "specsteer.server.cli",
    "audit": "specsteer.audit.cli",
    "privacy": "specsteer.privacy.cli",
    "federation": "specsteer.federation.cli",
}


def readme_command_lines(text: str) -> list[str]:
    """The commands of the README's ```sh blocks: continuation lines joined, comments dropped, and
    `a | b` alternatives (where each side is one of our commands) split."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for raw in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", raw).strip()
            if not line:
                continue
            for part in re.split(r"\s+(?:\||&&)\s+", line):
                lines.append(part.strip())
    return lines


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(words: list[str]) -> list[tuple[str, list[str]]]:
    """Each `--option` the line uses, with the choices the README spells after it (`a|b|c`)."""
    found = []
    for i, word in enumerate(words):
        # `[--opt VALUE]` in a synopsis: the brackets are docs, not part of the option.
        flag = word.strip("[]")
        if not flag.startswith("--"):
            continue
        flag, _, inline = flag.partition("=")
        value = inline or (words[i + 1].strip("[]") if i + 1 < len(words) else "")
        choices = value.split("|") if "|" in value and not value.startswith("-") else []
        found.append((flag, choices))
    return found


def _resolve(program: str, words: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that `program words...` reaches; an unknown subcommand fails the test."""
    parser: argparse.ArgumentParser = importlib.import_module(PARSERS[program]).build_parser()
    for word in words:
        subs = _subparsers(parser)
        if not subs or word.startswith("-") or word.startswith("["):
            break
        assert word in subs, f"`{program}` has no subcommand {word!r} (it has {sorted(subs)})"
        parser = subs[word]
    return parser


def _check_against_parser(parser: argparse.ArgumentParser, words: list[str], line: str) -> None:
    for flag, choices in _flags(words):
        action = parser._option_string_actions.get(flag)
        assert action is not None, f"README: `{line}`: {parser.prog} has no option {flag}"
        if choices and action.choices is not None:
            unknown = [c for c in choices if c not in action.choices]
            assert not unknown, f"README: `{line}`: {flag} does not accept {unknown}"


def _module_help(module: str) -> str:
    main: Callable[[list[str]], int] = importlib.import_module(module).main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    return out.getvalue()


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.M))


def _installed_pins() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8") + (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    pins = set(re.findall(r"([A-Za-z0-9_.\-]+==[\w.]+)", text))
    # The Makefile spells the part wheels as `name-part$(n)==version` over a range.
    for stem, version in re.findall(r"([A-Za-z0-9\-]+)-part\$\(n\)==([\w.]+)", text):
        pins.add(f"{stem}-part{{}}=={version}")
    return pins


def check_line(line: str) -> None:
    """Hold one README command line to what it runs."""
    words = shlex.split(line, posix=True) if "'" in line or '"' in line else line.split()
    program = _program(words[0])
    if program in PARSERS:
        parser = _resolve(program, words[1:])
        _check_against_parser(parser, words[1:], line)
    elif program in ("python", "python3") and words[1:2] == ["-m"] and words[2].startswith("bench."):
        help_text = _module_help(words[2])
        for flag, _ in _flags(words[3:]):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), f"README: `{line}`: no {flag}"
    elif program == "make":
        targets = _makefile_targets()
        for target in words[1:]:
            assert target in targets, f"README: `{line}`: the Makefile has no target {target!r}"
    elif program == "pip" and "install" in words:
        pins = _installed_pins()
        for word in words[words.index("install") + 1 :]:
            if "==" not in word or word.startswith("-"):
                continue
            spec = re.sub(r"\{[\d,.]+\}", "{}", word.strip("'\""))  # part{1,2,3} or part{1..22}
            name = spec.split("[")[0] if "[" in spec.split("==")[0] else spec
            assert name in pins or spec in pins, f"README: `{line}`: {spec} is not what make install pins"


COMMANDS = readme_command_lines(README.read_text(encoding="utf-8"))
OURS = [line for line in COMMANDS if _program(line.split()[0]) in {*PARSERS, "make", "python", "python3", "pip"}]


def test_the_readme_shows_commands_of_every_cli() -> None:
    shown = {_program(line.split()[0]) for line in OURS}
    assert set(PARSERS) <= shown, f"the README shows no command of {sorted(set(PARSERS) - shown)}"


@pytest.mark.parametrize("line", OURS)
def test_each_readme_command_parses_against_its_cli(line: str) -> None:
    check_line(line)


def test_a_drifted_option_is_caught() -> None:
    # The checker itself: a misspelt option, an unknown subcommand, a wrong choice and a missing
    # make target each fail.
    for wrong in (
        "sdk generate --prompt X --max-new-token 5",
        "audit prove LOG",
        "sdk generate --prompt X --method specsteer|telepathy",
        "make everything",
    ):
        with pytest.raises(AssertionError):
            check_line(wrong)
