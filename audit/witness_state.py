"""The witness's state file: per device log, the last checkpoint it cosigned, and what it refused.

The verifier, acting as each device log's witness (`server.witness`), keeps one JSON file:

    {"format": "specsteer-witness-state/1",
     "witness": "<the witness's verifier key>",
     "logs": {"<device name>": {"origin": "<log origin>", "key": "<the log's verifier key>",
                                "size": N, "root": "<base64>", "time": T,
                                "note": "<the last checkpoint it cosigned, cosignature included>"}},
     "refusals": [{"device": ..., "origin": ..., "size": N, "time": T, "reason": "..."}]}

It is the witness's own record, independent of the device: an auditor given it (`audit verify
--witness-state FILE`) learns the largest checkpoint the witness cosigned for the log, so a log
whose owner later deleted that cosigned checkpoint (a truncation, rollback or rewrite hidden by
dropping its cosignature) fails. Only the last cosigned checkpoint per log is kept, since each
one is proven consistent with the one before; refusals keep the most recent `MAX_REFUSALS`.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsteer.audit.errors import AuditError
from specsteer.audit.files import read_regular

FORMAT = "specsteer-witness-state/1"
MAX_REFUSALS = 256


@dataclass(frozen=True)
class WitnessedLog:
    """The last checkpoint the witness cosigned for one device's log, and the key it pinned."""

    origin: str
    key: str  # the log's verifier key, pinned at first sight
    size: int
    root: bytes
    time: int
    note: str  # the cosigned checkpoint note, the witness's signature line included

    def as_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "key": self.key,
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "time": self.time,
            "note": self.note,
        }


@dataclass
class WitnessState:
    witness: str
    logs: dict[str, WitnessedLog] = field(default_factory=dict)
    refusals: list[dict[str, Any]] = field(default_factory=list)

    def dumps(self) -> str:
        body = {
            "format": FORMAT,
            "witness": self.witness,
            "logs": {device: entry.as_dict() for device, entry in sorted(self.logs.items())},
            "refusals": self.refusals[-MAX_REFUSALS:],
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"


def _entry(device: str, raw: object) -> WitnessedLog:
    if not isinstance(raw, dict) or set(raw) != {"origin", "key", "size", "root", "time", "note"}:
        raise AuditError(f"the witness state's entry for {device!r} is malformed")
    ok_types = all(isinstance(raw[k], str) for k in ("origin", "key", "root", "note")) and all(
        isinstance(raw[k], int) and not isinstance(raw[k], bool) and raw[k] >= 0 for k in ("size", "time")
    )
    if not ok_types:
        raise AuditError(f"the witness state's entry for {device!r} has a field of the wrong type")
    try:
        root = base64.b64decode(raw["root"], validate=True)
    except (binascii.Error, ValueError):
        raise AuditError(f"the witness state's root for {device!r} is not base64") from None
    if len(root) != 32:
        raise AuditError(f"the witness state's root for {device!r} is not a SHA-256 hash")
    return WitnessedLog(raw["origin"], raw["key"], raw["size"], root, raw["time"], raw["note"])


def parse_state(text: str, where: str) -> WitnessState:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise AuditError(f"{where} is not a witness state file (not JSON)") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise AuditError(f"{where} is not a witness state file (format {FORMAT})")
    logs, refusals, witness = raw.get("logs"), raw.get("refusals"), raw.get("witness")
    if not isinstance(logs, dict) or not isinstance(refusals, list) or not isinstance(witness, str):
        raise AuditError(f"{where} is a malformed witness state file")
    return WitnessState(witness, {str(d): _entry(str(d), e) for d, e in logs.items()}, list(refusals))


MAX_STATE_BYTES = 256 << 20  # ~1 KB per device log and MAX_REFUSALS refusals: far below this


def read_state(path: Path) -> WitnessState:
    data = read_regular(Path(path), "the witness state", MAX_STATE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuditError(f"cannot read witness state {path}: {exc}") from None
    return parse_state(text, str(path))
