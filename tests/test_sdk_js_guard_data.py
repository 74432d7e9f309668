"""The TypeScript guard's data modules (sdk-js/src/guard/data/) are what the Python guard reads:
each generator of tools/guard_data writes its files anew from the Python sources and packages, and
the committed files must be byte-equal (a word list or table changed on one side only fails here)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import tools.guard_data

DATA = Path(__file__).resolve().parents[1] / "sdk-js" / "src" / "guard" / "data"
GENERATORS = sorted(m.name for m in pkgutil.iter_modules(tools.guard_data.__path__))


def test_every_committed_data_file_has_a_generator(tmp_path: Path) -> None:
    for name in GENERATORS:
        importlib.import_module(f"tools.guard_data.{name}").write(tmp_path / name)
    written = {
        p.relative_to(tmp_path / name) for name in GENERATORS for p in (tmp_path / name).rglob("*") if p.is_file()
    }
    committed = {p.relative_to(DATA) for p in DATA.rglob("*") if p.is_file()}
    assert committed <= written, f"data files no generator writes: {sorted(map(str, committed - written))}"


@pytest.mark.parametrize("name", GENERATORS)
def test_the_committed_data_is_what_its_generator_writes(name: str, tmp_path: Path) -> None:
    importlib.import_module(f"tools.guard_data.{name}").write(tmp_path)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert files, f"tools.guard_data.{name} wrote nothing"
    for fresh in files:
        committed = DATA / fresh.relative_to(tmp_path)
        assert committed.exists(), f"{committed} is missing: run python -m tools.guard_data.{name}"
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed} is stale: run python -m tools.guard_data.{name}"
        )
