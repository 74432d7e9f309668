"""What every kind of vector shares: the JSON form, float encoding, the refusal categories."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from google.protobuf.message import Message

from specsteer.core.errors import SpecSteerError

# The folder's version: it names the wire package (specsteer.v1) and the audit log format
# (specsteer-audit-log/1) these vectors were written for. README.md says when it bumps.
VERSION = 1


class ConformanceError(SpecSteerError):
    """A conformance folder cannot be written or read, or its vectors disagree with the SDK."""


def dump(path: Path, obj: Any) -> None:
    """`obj` as JSON at `path`: ASCII, keys in the order built, one trailing newline (byte-stable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=True, allow_nan=False) + "\n", encoding="ascii")


def load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConformanceError(f"cannot read {path}: {exc}") from None


# JSON has no NaN or infinity, and the vectors need both (a ratio of 0/0, gamma = inf): they are
# written as the strings "nan", "inf" and "-inf"; every other number is a JSON number.
_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def enc(x: float) -> float | str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def dec(x: float | str) -> float:
    if isinstance(x, str):
        return _SPECIAL[x]
    return float(x)


def f32(x: float) -> float:
    """`x` rounded to float32, as the Python float that holds it exactly (so JSON carries it exactly)."""
    return float(np.float32(x))


def f32s(xs: Any) -> list[float | str]:
    return [enc(f32(float(x))) for x in xs]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2), for frames the stubs would refuse to write."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


TEXT_LIMIT = 400  # characters of a frame's text form kept in a vector (a 4,097-token prompt is 57 KB)


def text_form(msg: Message) -> str:
    """The protobuf text form of a frame, for a human reading the vector (never compared)."""
    text = text_format.MessageToString(msg, as_one_line=True, print_unknown_fields=True)
    if len(text) > TEXT_LIMIT:
        return f"{text[:TEXT_LIMIT]} ... ({len(text) - TEXT_LIMIT} more characters)"
    return text


def mismatch(file: str, name: str, what: str, expected: Any, got: Any) -> str:
    return f"{file}: vector {name!r}: {what}: expected {expected!r}, got {got!r}"


# The refusal categories: stable identifiers for what a receiver refuses, one per rule of the
# protocol. The Python SDK reports each rule as a sentence; these patterns name the rule behind
# each sentence, so a vector's category is derived from what the SDK said, not written by hand.
# Order matters: the first match wins.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("not-protobuf", r"does not parse as|do not parse as"),
    ("unknown-field", r"unknown field"),
    ("non-canonical", r"not the (canonical|deterministic)"),
    ("token-after-padding", r"hold a token after padding"),
    ("out-of-vocabulary", r"outside the vocabulary"),
    ("no-kind", r"carries no Open, Round"),
    # A Close's witness request, by shape (core.wire.witness_violation).
    ("witness-origin", r"the checkpoint origin (must be|contains)"),
    ("witness-log-key-size", r"the log key is \d+ bytes"),
    ("witness-root-size", r"the checkpoint root hash is \d+ bytes"),
    ("witness-signature-size", r"the checkpoint signature is \d+ bytes"),
    ("witness-sizes", r"checkpoint sizes out of order or range"),
    ("witness-proof-shape", r"the consistency proof is at most"),
    # The downlink answering it (core.wire.cosignature_violation, the session contract).
    ("cosignature-not-alone", r"a cosignature downlink carries steering or accepted tokens"),
    ("cosignature-witness-name", r"the witness name (must be|contains)"),
    ("cosignature-size", r"the cosignature is \d+ bytes, not"),
    ("cosignature-not-a-verdict", r"a cosignature answers only a Close, never a round"),
    ("cosignature-unasked", r"carries a cosignature no Close asked for"),
    ("cosignature-seq", r"cosignature seq \d+ does not answer the Close"),
    # The witness's refusals (server.witness): it cosigns nothing else.
    ("witness-bad-signature", r"the checkpoint's signature does not verify under the log key"),
    ("witness-key-changed", r"not the key \S+ pinned for this device"),
    ("witness-rollback", r"smaller than the last cosigned size \d+: a rollback"),
    ("witness-fork", r"a second root for the cosigned size \d+: the log forked"),
    ("witness-conflict", r"the proof starts at size \d+, but the last cosigned size is \d+"),
    ("witness-inconsistent", r"the checkpoint is not consistent with the last cosigned one"),
    ("params-out-of-range", r"unknown (method|candidate policy)|gamma_infinite and a finite|out of (range|bounds)"),
    ("top-k-over-vocabulary", r"declared top-k \d+ exceeds the vocabulary"),
    ("prompt-too-long", r"the prompt has [\d,]+ tokens; the verifier takes at most"),
    ("empty-prompt", r"the Open carries no prompt tokens"),
    ("second-open", r"a second Open on one stream"),
    ("no-session", r"no session is open on this stream"),
    ("after-end", r"after Close|after the session (closed|fell back)"),
    ("round-seq", r"round seq \d+ where \d+ was expected"),
    ("round-unanswered", r"was sent before round \d+ was answered"),
    ("draft-too-long", r"more than the declared K"),
    ("not-padded", r"is not padded, but the session declared padded frames"),
    ("padding-undeclared", r"a PaddedRound in a session that did not declare padded frames"),
    ("padded-slots", r"a padded round fills exactly"),
    ("commit-too-long", r"a commit has at most"),
    ("placeholder-too-long", r"a placeholder has at most"),
    ("placeholder-undeclared", r"carries a placeholder no guard decision declared"),
    ("prompt-decision-order", r"a prompt guard decision \("),
    ("commit-without-candidates", r"a commit was sent with no steering candidates outstanding"),
    ("commit-not-a-candidate", r"the commit is not one of the last steering candidates"),
    ("recovery-missing", r"must commit a recovery token"),
    ("answer-unmatched", r"answers no outstanding round|does not answer the outstanding round"),
    ("accepted-over-draft", r"accepted \d+ of a \d+-token draft"),
    ("close-seq", r"Close seq \d+ where \d+ was expected"),
    ("too-many-candidates", r"more than k = |above the session's k|above the protocol maximum k"),
    ("candidate-length", r"candidate \d+ has \d+ tokens"),
    ("non-finite-value", r"non-finite value"),
    ("fusion-undeclared", r"a dense fusion vector in a session that did not declare method fusion"),
    ("fusion-with-candidates", r"a dense fusion vector and top-k candidates in one downlink"),
    ("fusion-size", r"a fusion vector of \d+ bytes"),
)


def category(message: str) -> str:
    """The refusal category of one of the SDK's messages; a message no pattern knows is an error
    (a new rule needs a category, and README.md a line, before vectors can name it)."""
    for name, pattern in CATEGORIES:
        if re.search(pattern, message):
            return name
    raise ConformanceError(f"no conformance category matches the SDK's refusal {message!r}; add one")
