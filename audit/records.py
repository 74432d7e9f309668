"""The audit log's record schema: one canonical JSON object per record.

Canonical means `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`: no
floats, no duplicate keys, no whitespace; a record whose bytes are not exactly that is rejected.
These bytes are the Merkle leaf data. Every record has

    index   its position in the log (0, 1, 2, ...), so a deleted or moved record names itself
    kind    one of the kinds below
    time    UTC wall-clock time, "YYYY-MM-DDTHH:MM:SS.ffffffZ" (informational; clocks jump)

and exactly the fields of its kind, nothing else (an unexpected field could carry private text):

    log-header      format, origin, key, max_top_k    record 0: the log's identity and its verifier
                                                      key; the protocol maximum k (WIRE_MAX_TOP_K)
    session-begin   session, n=0, vocab_size, max_top_k   a device session starts; the Specialist's
                                                      vocabulary size and the k cap it accepts
    uplink          session, n, dir="up", len, sha256, bytes      the exact serialized `Uplink`
    downlink        session, n, dir="down", len, sha256, bytes    the exact received `Downlink`
    fallback        session, n, reason                the device finished locally (reason is a
                                                      short identifier, never free text)
    guard-decision  session, n, decision, count, placeholder   the egress guard's decision (cut,
                                                      placeholder, keep-local; prompt-redact or
                                                      prompt-allow right after the Open), how many
                                                      spans, the placeholder label; never the span
    repair          file, offset, cut_bytes, cut_sha256   a torn final write was cut back on open
    device-cert     device, cert_sha256               binds the log key to the device's mTLS client
                                                      certificate (SHA-256 of its DER) and its name;
                                                      record 1 of a device's log, again on rotation

`session` is a random 128-bit ID (32 hex digits) the device chose; it never leaves the device.
`n` numbers a session's records from 0 without gaps. `bytes` is standard base64 of the payload;
`sha256` is its hex SHA-256 and `len` its length.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specsteer.audit.errors import RecordError

LOG_FORMAT = "specsteer-audit-log/1"
MAX_PAYLOAD_BYTES = 1 << 20  # one uplink or downlink; real ones are well under a kilobyte
MAX_JSON_INT = 2**53 - 1

KIND_HEADER = "log-header"
KIND_BEGIN = "session-begin"
KIND_UPLINK = "uplink"
KIND_DOWNLINK = "downlink"
KIND_FALLBACK = "fallback"
KIND_GUARD = "guard-decision"
KIND_REPAIR = "repair"
KIND_DEVICE = "device-cert"
KIND_ROTATION = "key-rotation"  # the key in force hands the log to a new key (audit.rotation)
SESSION_KINDS = frozenset({KIND_BEGIN, KIND_UPLINK, KIND_DOWNLINK, KIND_FALLBACK, KIND_GUARD})

_SESSION_RE = re.compile(r"[0-9a-f]{32}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_IDENT_RE = re.compile(r"[a-z][a-z0-9-]{0,63}")
# A guard placeholder is a label such as "<EMAIL>", "[EMAIL]" or "<PERSON_1>", never user text: an
# upper-case word in brackets (lower case, digits-first and ':' or '-' could spell a password).
_PLACEHOLDER_RE = re.compile(r"[<\[{]?[A-Z][A-Z_]{0,23}(?:_[0-9]{1,3})?[>\]}]?")
# ASCII digits only: \d would take any script's digits, ~9 bits per position the device could choose.
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_FILE_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds(time: str) -> float:
    """A record's `time` as Unix seconds."""
    return datetime.strptime(time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def is_identifier(text: str) -> bool:
    return bool(_IDENT_RE.fullmatch(text))


def is_placeholder(text: str) -> bool:
    return bool(_PLACEHOLDER_RE.fullmatch(text))


def _str(pattern: re.Pattern[str]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, str) and bool(pattern.fullmatch(v))


def _int(lo: int, hi: int = MAX_JSON_INT) -> Callable[[object], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _const(value: str) -> Callable[[object], bool]:
    return lambda v: v == value


def _b64(v: object) -> bool:
    return isinstance(v, str) and len(v) <= 4 * (MAX_PAYLOAD_BYTES // 3 + 1)


def _text(max_len: int) -> Callable[[object], bool]:
    return lambda v: isinstance(v, str) and 0 < len(v) <= max_len and v.isprintable()


_COMMON: dict[str, Callable[[object], bool]] = {
    "index": _int(0),
    "kind": _str(re.compile(r"[a-z-]+")),
    "time": _str(_TIME_RE),
}
_SESSION = {"session": _str(_SESSION_RE), "n": _int(0)}
_PAYLOAD = {"len": _int(0, MAX_PAYLOAD_BYTES), "sha256": _str(_HEX64_RE), "bytes": _b64}

SCHEMA: dict[str, dict[str, Callable[[object], bool]]] = {
    KIND_HEADER: {
        "format": _const(LOG_FORMAT),
        "origin": _text(256),
        "key": _text(512),
        "max_top_k": _int(1, 2**32 - 1),
    },
    KIND_BEGIN: {**_SESSION, "vocab_size": _int(1, 2**32), "max_top_k": _int(1, 2**32 - 1)},
    KIND_UPLINK: {**_SESSION, "dir": _const("up"), **_PAYLOAD},
    KIND_DOWNLINK: {**_SESSION, "dir": _const("down"), **_PAYLOAD},
    KIND_FALLBACK: {**_SESSION, "reason": _str(_IDENT_RE)},
    KIND_GUARD: {**_SESSION, "decision": _str(_IDENT_RE), "count": _int(0), "placeholder": _str(_PLACEHOLDER_RE)},
    KIND_REPAIR: {"file": _str(_FILE_RE), "offset": _int(0), "cut_bytes": _int(1), "cut_sha256": _str(_HEX64_RE)},
    KIND_DEVICE: {"device": _text(128), "cert_sha256": _str(_HEX64_RE)},
    KIND_ROTATION: {"key": _text(512), "signature": _b64},
}


def encode(fields: Mapping[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


@dataclass(frozen=True)
class Record:
    """One parsed, schema-checked record; `data` is its exact stored bytes (the Merkle leaf data)."""

    index: int
    kind: str
    fields: Mapping[str, Any]
    data: bytes

    @property
    def session(self) -> str | None:
        return self.fields.get("session")

    @property
    def payload(self) -> bytes | None:
        """The wire bytes of an uplink or downlink (already checked against `sha256` and `len`)."""
        if self.kind not in (KIND_UPLINK, KIND_DOWNLINK):
            return None
        return base64.b64decode(self.fields["bytes"])

    def describe(self, position: int | None = None) -> str:
        """A short name for messages: 'record 12 (uplink, n=3 of session 1a2b3c4d…)'.

        `position` is where the record sits in the log, which is what an auditor can find; it
        differs from `index` only in a tampered log.
        """
        where = self.index if position is None else position
        if self.session is not None:
            return f"record {where} ({self.kind}, n={self.fields['n']} of session {self.session[:8]}…)"
        return f"record {where} ({self.kind})"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise RecordError(f"duplicate field {k!r}")
        out[k] = v
    return out


def _reject_float(text: str) -> float:
    raise RecordError("records hold no floating-point numbers")


def parse(data: bytes) -> Record:
    """Parse and check one record's bytes; raise `RecordError` naming what is wrong."""
    try:
        obj = json.loads(data.decode("ascii"), object_pairs_hook=_no_duplicates, parse_float=_reject_float)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # RecursionError: a hostile record nested thousands deep must fail as a record, not crash verify.
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise RecordError(f"not a JSON record ({detail})") from None
    if not isinstance(obj, dict):
        raise RecordError("not a JSON object")
    kind = obj.get("kind")
    if kind not in SCHEMA:
        raise RecordError(f"unknown record kind {kind!r}")
    schema = {**_COMMON, **SCHEMA[kind]}
    extra = sorted(set(obj) - set(schema))
    if extra:
        raise RecordError(f"unexpected field(s) {', '.join(extra)} in a {kind} record")
    for name, valid in schema.items():
        if name not in obj:
            raise RecordError(f"a {kind} record lacks its {name!r} field")
        if not valid(obj[name]):
            raise RecordError(f"field {name!r} of a {kind} record is out of range or malformed")
    if encode(obj) != data:
        raise RecordError("the record is not in canonical form")
    if kind == KIND_BEGIN and obj["n"] != 0:
        raise RecordError("a session-begin record has n = 0")
    if kind in (KIND_UPLINK, KIND_DOWNLINK):
        try:
            payload = base64.b64decode(obj["bytes"], validate=True)
        except (binascii.Error, ValueError):
            raise RecordError("the payload is not valid base64") from None
        if base64.b64encode(payload).decode() != obj["bytes"]:
            raise RecordError("the payload base64 is not canonical")
        if len(payload) != obj["len"]:
            raise RecordError(f"the payload is {len(payload)} bytes but the record says {obj['len']}")
        if hashlib.sha256(payload).hexdigest() != obj["sha256"]:
            raise RecordError("the payload does not hash to the recorded sha256: its bytes were altered")
    return Record(obj["index"], kind, obj, data)


def build(index: int, kind: str, fields: Mapping[str, Any], *, time: str | None = None) -> bytes:
    """Encode a new record and check it against the schema, so the log never holds one it would reject.

    `time` is its stamp (`now()` if not given)."""
    data = encode({"index": index, "kind": kind, "time": time if time is not None else now(), **fields})
    parse(data)
    return data


def payload_fields(direction: str, payload: bytes) -> dict[str, Any]:
    return {
        "dir": direction,
        "len": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "bytes": base64.b64encode(payload).decode(),
    }
