"""The layering of docs/architecture.md, enforced: which top-level package may import which.

Every `import` and `from ... import` of the project's own packages is read from the source (at
module level and inside functions alike), so a lazy import cannot hide an edge.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.source_imports import imported_names, raw_imported_names

ROOT = Path(__file__).resolve().parents[1]

# What each package may import of ours (docs/architecture.md, "Who may import whom").
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "audit": {"core"},
    "privacy": {"core", "audit"},
    "sdk": {"core", "privacy", "audit"},
    "server": {"core", "sdk", "audit"},
    "federation": {"core", "sdk", "privacy", "server", "audit"},
    "demo": {"core", "sdk", "privacy", "audit", "server", "federation"},
    "bench": {"core", "sdk", "privacy", "audit", "server", "federation", "demo", "deploy"},
    # The fleet launcher runs `server serve` as processes and HAProxy; it imports none of ours.
    "deploy": set(),
}
OURS = set(ALLOWED)


def imports_of(package: str) -> dict[str, set[str]]:
    """For each of our packages that `package` imports: the modules of `package` that import it."""
    found: dict[str, set[str]] = {}
    for name, where in imported_names(package, generated=False):
        top = name.split(".")[0]
        if top in OURS and top != package:
            found.setdefault(top, set()).add(where)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_the_layering_allows(package: str) -> None:
    wrong = {dep: sorted(where) for dep, where in imports_of(package).items() if dep not in ALLOWED[package]}
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}; it imports {wrong}"


def test_the_allowed_graph_has_no_cycles() -> None:
    # The rules themselves must describe layers: a cycle in ALLOWED would permit one in the code.
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 1:
            raise AssertionError(f"cycle: {' -> '.join([*path, node])}")
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in ALLOWED[node]:
            visit(dep, [*path, node])
        state[node] = 2

    for package in ALLOWED:
        visit(package, [])


def test_every_top_level_package_is_placed() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "tools", "specsteer"}
    assert packages <= OURS, f"packages without a layer in docs/architecture.md: {sorted(packages - OURS)}"


def test_the_device_sdk_never_imports_the_cloud_or_federation() -> None:
    deps = imports_of("sdk")
    assert "server" not in deps and "federation" not in deps, deps


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def command_modules() -> set[str]:
    """The modules behind the console scripts (`[project.scripts]`): `sdk.cli`, `server.cli`, ...

    `core.cli` is no command: it is the CLI plumbing (parser, exit codes) every command imports.
    Named by their folders, as `imported_names` names what a package imports."""
    return {target.split(":")[0].removeprefix("specsteer.") for target in _pyproject()["scripts"].values()}


def test_no_package_uses_another_packages_command_line_as_a_library() -> None:
    """A command line is a front end (options, printing, exit codes): what two packages share lives
    in a library module both call, never in one's `cli`. The one exception is the repository's
    demo (`python -m demo`, no part of the wheel), which takes `sdk generate`'s options and runs its
    flow (docs/architecture.md)."""
    commands = command_modules()
    assert {"sdk.cli", "server.cli", "audit.cli", "privacy.cli", "federation.cli"} <= commands
    extends_sdk_cli = {"demo"}
    wrong: dict[str, set[str]] = {}
    for package in sorted(ALLOWED):
        for name, where in imported_names(package, generated=False, members=True):
            for command in commands:
                owner = command.split(".")[0]
                if owner == package or not (name == command or name.startswith(command + ".")):
                    continue
                if command == "sdk.cli" and package in extends_sdk_cli:
                    continue
                wrong.setdefault(command, set()).add(where)
    assert not wrong, {command: sorted(where) for command, where in wrong.items()}


def test_every_import_of_ours_goes_through_the_one_root() -> None:
    """`import sdk` from the repository root would load a second copy of every module beside
    `specsteer.sdk` (two `SpecSteerError` classes, two registries): our code, the benchmarks and the
    tests import our packages as `specsteer.<package>` only, as an installed app must."""
    bare: dict[str, set[str]] = {}
    for top in sorted(ROOT.glob("*/__init__.py")):
        for name, where in raw_imported_names(top.parent.name):
            if name.split(".")[0] in OURS - {"demo", "bench", "deploy"}:
                bare.setdefault(name, set()).add(where)
    assert not bare, {name: sorted(where) for name, where in bare.items()}


def test_code_in_strings_imports_through_the_one_root_too() -> None:
    """Code the tests and tools run in a child interpreter (`python -c "from sdk.cli import ..."`)
    would load the top-level folder as a second package from the repository's root."""
    import ast
    import re

    bare = re.compile(r"(?m)^\s*(?:from|import) (?:core|sdk|server|audit|privacy|federation)\b")
    found: list[str] = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        if ".venv" in path.parts or "specsteer" in path.relative_to(ROOT).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and bare.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_the_root_links_every_package_that_ships() -> None:
    shipped = {"core", "sdk", "server", "audit", "privacy", "federation"}
    links = {p.name for p in (ROOT / "specsteer").iterdir() if p.is_symlink()}
    assert links == shipped
    for name in shipped:
        assert (ROOT / "specsteer" / name).resolve() == ROOT / name


@pytest.mark.parametrize("package", ["core", "sdk", "server", "audit", "privacy", "federation"])
def test_each_package_docstring_names_every_module(package: str) -> None:
    """A package's docstring is its map: every module in it is named there (docs/architecture.md)."""
    import ast
    import re

    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))) or ""
    text = re.sub(r"\s+", " ", doc)
    modules = {p.stem for p in (ROOT / package).glob("*.py") if p.stem not in ("__init__", "__main__")}
    modules = {m for m in modules if "_pb2" not in m}
    unnamed = sorted(m for m in modules if not re.search(rf"(?<![\w]){package}\.{m}\b|(?<![\w/]){m}\.py\b", text))
    assert not unnamed, f"{package}/__init__.py does not name: {unnamed}"
