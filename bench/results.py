"""A benchmark's results as they land in an output folder (docs/results): NAME.json, what a later
run or page reads, beside NAME.md, the page a person reads. Each is written whole or not at all
(`core.fileio.atomic_write`), so a run cut short leaves the last complete pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specsteer.core.fileio import atomic_write

__all__ = ["write_results"]


def write_results(out: Path, name: str, result: Any, page: str) -> None:
    """Write OUT/NAME.json (`result`, indented) and OUT/NAME.md (`page`), making OUT if need be."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / f"{name}.json", json.dumps(result, indent=2) + "\n", mode=0o644)
    atomic_write(out / f"{name}.md", page, mode=0o644)
