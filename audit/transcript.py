"""The server's own transcript of the uplinks it received, and its comparison with the device's log.

The server keeps this file, independently of the device: one JSON object per line,

    {"format": "specsteer-server-transcript/1"}                      first line
    {"stream": "<id>", "i": <0, 1, ...>, "len": <bytes>, "sha256": "<hex>"}   one per uplink received

`stream` is the server's own name for a gRPC stream. The device's session IDs never go on the wire,
so streams are matched to device sessions by content: a stream matches the device session whose
uplink hashes it equals, message for message. Anything the server received that the device never
logged is egress that bypassed the recorder, and fails the check.

On a gRPC server, take the raw bytes (`request_deserializer=bytes`, i.e. identity) so the hash is
over exactly what arrived, call `record_uplink(stream, raw)`, then parse.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from audit.errors import AuditError

TRANSCRIPT_FORMAT = "specsteer-server-transcript/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STREAM = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class ServerTranscript:
    """Appends the hash of every uplink the server receives; one writer per file, thread-safe."""

    def __init__(self, path: Path, fd: int, *, durable: bool) -> None:
        self.path = path
        self._fd = fd
        self._durable = durable
        self._lock = threading.Lock()
        self._counts: dict[str, int] = defaultdict(int)

    @classmethod
    def open(cls, path: Path | str, *, durable: bool = True) -> Self:
        """Open (or create) a transcript. `durable` fsyncs every line, so a crash loses none."""
        path = Path(path)
        exists = path.exists() and path.stat().st_size > 0
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        transcript = cls(path, fd, durable=durable)
        if exists:
            for stream, entries in read_transcript(path).streams.items():
                transcript._counts[stream] = len(entries)
        else:
            transcript._write({"format": TRANSCRIPT_FORMAT})
        return transcript

    def _write(self, obj: Mapping[str, object]) -> None:
        line = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        os.write(self._fd, line)
        if self._durable:
            os.fsync(self._fd)

    def begin_stream(self) -> str:
        return secrets.token_hex(8)

    def record_uplink(self, stream: str, payload: bytes) -> None:
        if not _STREAM.fullmatch(stream):
            raise AuditError(f"a stream name is 1-128 letters, digits or ._:-; got {stream!r}")
        with self._lock:
            i = self._counts[stream]
            self._write({"stream": stream, "i": i, "len": len(payload), "sha256": hashlib.sha256(payload).hexdigest()})
            self._counts[stream] = i + 1

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(frozen=True)
class TranscriptEntry:
    line: int  # 1-based line number in the file
    sha256: str


@dataclass
class Transcript:
    streams: dict[str, list[TranscriptEntry]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_transcript(path: Path) -> Transcript:
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise AuditError(f"cannot read the server transcript {path}: {exc.strerror}") from None
    out = Transcript()
    if lines and lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            out.problems.append(f"server transcript line {number} is not JSON")
            continue
        if number == 1:
            if obj != {"format": TRANSCRIPT_FORMAT}:
                out.problems.append(f"server transcript line 1 is not a {TRANSCRIPT_FORMAT} header")
            continue
        ok = (
            isinstance(obj, dict)
            and set(obj) == {"stream", "i", "len", "sha256"}
            and isinstance(obj["stream"], str)
            and _STREAM.fullmatch(obj["stream"])
            and isinstance(obj["i"], int)
            and isinstance(obj["len"], int)
            and isinstance(obj["sha256"], str)
            and _HEX64.fullmatch(obj["sha256"])
        )
        if not ok:
            out.problems.append(f"server transcript line {number} is not a transcript entry")
            continue
        entries = out.streams.setdefault(obj["stream"], [])
        if obj["i"] != len(entries):
            out.problems.append(
                f"server transcript line {number}: stream {obj['stream']} message {obj['i']} follows "
                f"message {len(entries) - 1} (a gap or reordering in the server's own record)"
            )
        entries.append(TranscriptEntry(number, obj["sha256"]))
    if not lines:
        out.problems.append("the server transcript is empty")
    return out


@dataclass(frozen=True)
class DeviceSession:
    """What the device logged for one session: its uplinks as (record index, sha256), and how it ended."""

    session_id: str
    uplinks: Sequence[tuple[int, str]]
    fell_back: bool


@dataclass
class Comparison:
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: int = 0


def compare(device: Sequence[DeviceSession], transcript: Transcript) -> Comparison:
    """Match server streams to device sessions hash for hash; every mismatch names records and lines."""
    result = Comparison(failures=list(transcript.problems))
    unmatched = [d for d in device if d.uplinks]
    by_hashes: dict[tuple[str, ...], list[DeviceSession]] = defaultdict(list)
    for d in unmatched:
        by_hashes[tuple(h for _, h in d.uplinks)].append(d)
    leftovers: list[tuple[str, list[TranscriptEntry]]] = []
    for stream, entries in transcript.streams.items():
        key = tuple(e.sha256 for e in entries)
        if by_hashes.get(key):
            d = by_hashes[key].pop(0)
            unmatched.remove(d)
            result.matched += 1
        else:
            leftovers.append((stream, entries))
    for stream, entries in leftovers:
        key = tuple(e.sha256 for e in entries)
        # A device that fell back may have logged uplinks that never arrived: a prefix is fine then.
        prefix = next((d for d in unmatched if d.fell_back and tuple(h for _, h in d.uplinks)[: len(key)] == key), None)
        if prefix is not None:
            unmatched.remove(prefix)
            result.matched += 1
            result.notes.append(
                f"server stream {stream} received {len(key)} of the {len(prefix.uplinks)} uplinks of device session "
                f"{prefix.session_id[:8]}… (which fell back)"
            )
            continue
        result.failures.append(_explain_stray(stream, entries, unmatched))
    for d in unmatched:
        if d.fell_back:
            result.notes.append(f"device session {d.session_id[:8]}… fell back; the server has no stream for it")
        else:
            first = d.uplinks[0][0]
            result.failures.append(
                f"device session {d.session_id[:8]}… (uplinks from record {first}) closed normally but the server "
                f"has no matching record of its {len(d.uplinks)} uplinks"
            )
    return result


def _explain_stray(stream: str, entries: Sequence[TranscriptEntry], device: Sequence[DeviceSession]) -> str:
    """Name the first message the server received that the device never logged."""
    best, best_len = None, -1
    for d in device:
        n = 0
        while n < min(len(entries), len(d.uplinks)) and entries[n].sha256 == d.uplinks[n][1]:
            n += 1
        if n > best_len:
            best, best_len = d, n
    if best is not None and best_len > 0:
        if best_len < len(entries):
            e = entries[best_len]
            return (
                f"server stream {stream}: message {best_len} (transcript line {e.line}, sha256 {e.sha256[:16]}…) "
                f"was received but the device logged a different uplink there (device session "
                f"{best.session_id[:8]}…, after record {best.uplinks[best_len - 1][0]})"
            )
        return (
            f"server stream {stream} received only {len(entries)} of the {len(best.uplinks)} uplinks of device "
            f"session {best.session_id[:8]}…, which closed normally (first missing: record {best.uplinks[best_len][0]})"
        )
    e = entries[0]
    return (
        f"server stream {stream}: message 0 (transcript line {e.line}, sha256 {e.sha256[:16]}…) matches no uplink "
        "the device logged: egress that bypassed the audit log"
    )
