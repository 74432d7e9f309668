"""The layering of docs/architecture.md, enforced: which top-level package may import which.

Every `import` and `from ... import` of the project's own packages is read from the source (at
module level and inside functions alike), so a lazy import cannot hide an edge.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.source_imports import imported_names

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
    "bench": {"core", "sdk", "privacy", "audit", "server", "federation", "demo"},
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
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "tools"}
    assert packages <= OURS, f"packages without a layer in docs/architecture.md: {sorted(packages - OURS)}"


def test_the_device_sdk_never_imports_the_cloud_or_federation() -> None:
    deps = imports_of("sdk")
    assert "server" not in deps and "federation" not in deps, deps
