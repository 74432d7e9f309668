"""Log-key rotation: a `key-rotation` record, the old key's signature handing the log to a new key.

    {"index": P, "kind": "key-rotation", "time": ..., "key": "<the new verifier key>",
     "signature": "<base64 Ed25519 by the key in force>"}

The signature is over `"specsteer-key-rotation/1\\n" || <old verifier key> || "\\n" || <new
verifier key> || "\\n" || P || "\\n"`, so it binds both keys and the position. The new key keeps the
log's name (its origin: witnesses and checkpoints know the log by it). The checkpoint of size P+1,
covering the rotation, is the old key's last; every checkpoint of size P+2 or more is the new key's
(`KeyChain.key_for`). A rotation whose signature does not verify under the key in force hands
nothing over: checkpoints signed by its key then fail, and `audit verify` names the record.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass, field

from specsteer.audit import records
from specsteer.audit.errors import AuditError
from specsteer.audit.note import VerifierKey

__all__ = ["HEADER", "KeyChain", "handover_message", "key_chain"]

HEADER = "specsteer-key-rotation/1\n"


def handover_message(old: VerifierKey, new: VerifierKey, position: int) -> bytes:
    return f"{HEADER}{old}\n{new}\n{position}\n".encode()


@dataclass
class KeyChain:
    """The log key in force at each size: the header's, then each valid rotation's."""

    initial: VerifierKey
    rotations: list[tuple[int, VerifierKey]] = field(default_factory=list)  # (position, new key)

    def key_for(self, size: int) -> VerifierKey:
        """The key that signs a checkpoint of `size` records."""
        key = self.initial
        for position, new in self.rotations:
            if size > position + 1:
                key = new
        return key

    @property
    def current(self) -> VerifierKey:
        return self.rotations[-1][1] if self.rotations else self.initial


def key_chain(initial: VerifierKey, parsed: Iterable[tuple[int, records.Record | None]]) -> tuple[KeyChain, list[str]]:
    """The chain of `initial` through the log's rotation records, and what is wrong with any of them."""
    chain = KeyChain(initial)
    problems: list[str] = []
    for position, rec in parsed:
        if rec is None or rec.kind != records.KIND_ROTATION:
            continue
        old = chain.current
        where = f"record {position} (key-rotation)"
        try:
            new = VerifierKey.parse(rec.fields["key"])
            signature = base64.b64decode(rec.fields["signature"], validate=True)
        except (AuditError, binascii.Error, ValueError) as exc:
            problems.append(f"{where}: the new key or its signature is unreadable: {exc}")
            continue
        if new.name != old.name:
            problems.append(f"{where}: the new key is named {new.name!r}, not the log's {old.name!r}")
            continue
        if not old.verify(handover_message(old, new, position), signature):
            problems.append(
                f"{where}: the handover to {new} is not signed by the key in force ({old}): nothing is handed over"
            )
            continue
        chain.rotations.append((position, new))
    return chain, problems
