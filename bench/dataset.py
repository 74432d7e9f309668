"""Reading the dev data files the benchmarks share (JSONL, one author a line: user_id, profile, queries)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["first_users"]


def first_users(path: Path, count: int) -> list[dict[str, Any]]:
    """The first `count` authors of a dataset file, read no further than needed (blank lines skipped)."""
    users: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if len(users) == count:
                break
            if line.strip():
                users.append(json.loads(line))
    return users
