"""Every absolute import in a package's source, read with `ast` (module level and inside functions
alike, so a lazy import cannot hide). Shared by the layering and the packaging tests."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "specsteer"


def imported_names(package: str, *, generated: bool = True, members: bool = False) -> Iterator[tuple[str, str]]:
    """`raw_imported_names` with our one root taken off: the layering and packaging rules name our
    packages by their folders (`sdk`, not `specsteer.sdk`)."""
    for name, where in raw_imported_names(package, generated=generated, members=members):
        yield name.removeprefix(ROOT_PACKAGE + "."), where


def raw_imported_names(package: str, *, generated: bool = True, members: bool = False) -> Iterator[tuple[str, str]]:
    """(dotted module name, file relative to the repository) for each import in `package`;
    `generated=False` leaves out the generated stubs (`*_pb2*`); `members=True` also names what a
    `from X import y` takes (`X.y`), so `from sdk import cli` is seen as `sdk.cli`."""
    for path in sorted((ROOT / package).rglob("*.py")):
        if not generated and "_pb2" in path.name:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if members:
                    names += [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                yield name, str(path.relative_to(ROOT))
