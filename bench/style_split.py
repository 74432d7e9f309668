"""The fixed split of each author's history that the style measures are fitted on, and nothing else.

A style classifier fitted on the very entries retrieval quotes and the adapters train on rewards
copying them: a device that reproduces its history scores above the author's own new writing
(docs/results/personal_loop.md before issue #51). So every history entry goes, by a hash of
what identifies it, either to the **style part** (fits the style measures; never retrieved, never
trained on) or to the **device part** (what the device holds for retrieval and the federation's
adapters). The rule depends on the entry alone, not on the run or the order of the file, so every
benchmark and every rerun splits the same way, and it is recorded in each results file (`RULE`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["RULE", "STYLE_SHARE", "device_part", "in_style_part", "split_history", "style_part"]

STYLE_SHARE = 4
"""One entry in STYLE_SHARE goes to the style part: about 75 of an author's 300 (enough to fit the
classifier), the other three quarters stay the device's."""

RULE = (
    f"an entry is in the style part iff int(sha256(user_id + '\\0' + time + '\\0' + subject)[:8], 16) "
    f"% {STYLE_SHARE} == 0; the style measures are fitted on that part only, retrieval and the "
    "federation's adapters see only the rest"
)


def in_style_part(user_id: str, entry: Mapping[str, Any]) -> bool:
    """Whether `user_id`'s history `entry` belongs to the style part (`RULE`)."""
    key = f"{user_id}\0{entry.get('time', '')}\0{entry.get('subject', '')}".encode()
    return int(hashlib.sha256(key).hexdigest()[:8], 16) % STYLE_SHARE == 0


def split_history(user: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(device part, style part) of a dataset user's `profile`, each in the file's order (oldest first)."""
    uid = str(user["user_id"])
    device: list[dict[str, Any]] = []
    style: list[dict[str, Any]] = []
    for entry in user["profile"]:
        (style if in_style_part(uid, entry) else device).append(entry)
    return device, style


def device_part(user: Mapping[str, Any]) -> dict[str, Any]:
    """The user with only the device part of their history: what retrieval and the adapters may see."""
    return {**user, "profile": split_history(user)[0]}


def style_part(users: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Author -> the bodies of their style part: what the style measures are fitted on."""
    return {str(u["user_id"]): [e["body"] for e in split_history(u)[1]] for u in users}
