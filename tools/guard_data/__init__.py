"""Generators of the TypeScript guard's data modules (sdk-js/src/guard/data/): each module's
`write(out_dir)` writes its files from the Python guard's own sources, so the two guards read the
same word lists and tables (tests/test_sdk_js_guard_data.py holds the committed files to them)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "sdk-js" / "src" / "guard" / "data"


def write_module(out_dir: str | Path, name: str, text: str) -> None:
    """Write one data module, `name`, into `out_dir` (made if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text, encoding="utf-8")


def main(write: Callable[[Path], object]) -> None:
    """`python -m tools.guard_data.NAME [OUT_DIR]`: write NAME's files into OUT_DIR (default: DATA)."""
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
