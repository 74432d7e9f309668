"""Reading the dev data files the benchmarks share (JSONL, one author a line: user_id, profile, queries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specsteer.privacy.profile_format import read_users

__all__ = ["first_users"]


def first_users(path: Path, count: int | None = None) -> list[dict[str, Any]]:
    """The first `count` authors of a dataset file (all of them by default), as stored
    (`privacy.profile_format` reads and checks the format; a benchmark writes subsets of these)."""
    users = read_users(path, what="the data file")[:count]
    return [u.user_object for u in users if u.user_object is not None]
