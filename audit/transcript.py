"""The server's own transcript of what each device sent, and its comparison with a device's log.

The server keeps this file, independently of the device: one JSON object per line,

    {"format": "specsteer-server-transcript/2"}                                   first line
    {"format": "specsteer-server-transcript/2", "replica": "<name>"}              ... of a named replica
    {"stream": "<id>", "device": "<name>", "cert_sha256": "<hex>"}                 a stream begins
    {"stream": "<id>", "i": <0, 1, ...>, "len": <bytes>, "sha256": "<hex>"}       one per uplink received
    {"stream": "<id>", "end": "<outcome>", "uplinks": <count>}                     the stream ended

`stream` is the server's own name for a gRPC stream. `device` and `cert_sha256` are the common
name and the DER SHA-256 of the client certificate mutual TLS verified (`audit.identity`), so the
transcript says which device sent each stream. The device's session IDs never go on the wire, so
streams are matched to device sessions by content: a stream matches the device session whose
uplink hashes it equals, message for message, and only among the streams of the certificate the
device's log binds (its `device-cert` records). Anything a device's certificate sent that its log
does not hold fails the check: egress that bypassed the recorder, or a log cut back below what the
server witnessed. The `end` line is the server's witness statement: how many uplinks it saw on the
stream when the stream ended.

The device's own `device-cert` records cannot pick which streams are compared: every certificate
the server saw under a name the log binds must be bound by the log too (a certificate record
rewritten to a made-up fingerprint would otherwise hide all of the device's streams), and a
certificate bound under one name that the server saw under another fails. Order is compared too,
by causality rather than by position, so that concurrent sessions raise no false alarm: if a
session received a downlink before another session's first uplink was logged, the server, which
records each uplink before it answers, must have received the first session's first uplink
before the other's (within one transcript file; replicas share no clock).

A verifier run as one replica of a fleet (`server serve --replica NAME`) names itself in its
header and in its file's name, `server-transcript.NAME.jsonl` (`transcript_name`), so the replicas
of a fleet share one folder and an auditor given that folder (`transcript_files`) sees, and is told,
which replicas' transcripts it compared.

The transcript's folder must not be writable by the group or other users (`check_folder`): one
who can write there can replace the file, or create it first as theirs, and so choose what the
server's witness statement says.

On a gRPC server, take the raw bytes (`request_deserializer=bytes`, i.e. identity) so the hash is
over exactly what arrived, call `begin_stream` once the peer is authenticated, `record_uplink(stream,
raw)` for every frame before parsing it, and `end_stream` when the stream is over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Self

from specsteer.audit.errors import AuditError
from specsteer.audit.files import open_regular

TRANSCRIPT_FORMAT = "specsteer-server-transcript/2"
# A replica's name: what it calls itself in its header and its file name (no dot, no slash).
REPLICA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
UNNAMED_FILE = "server-transcript.jsonl"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STREAM = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_OUTCOME = re.compile(r"[a-z][a-z0-9-]{0,31}")
_TRANSCRIPT_FILE = re.compile(r"server-transcript(\.[A-Za-z0-9][A-Za-z0-9_-]{0,63})?\.jsonl")
MAX_DEVICE_NAME = 128


def check_folder(directory: Path) -> None:
    """Refuse (`AuditError`, one sentence) a transcript folder that is none or that the group or
    other users may write in (mode 0777, 0775, or 1777 like /tmp)."""
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise AuditError(f"cannot use transcript folder {directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise AuditError(f"the transcript folder {directory} is not a folder")
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise AuditError(
            f"the transcript folder {directory} can be written by other users (mode {mode:04o}), who could replace "
            f"the server's transcript: chmod go-w {directory}"
        )


def transcript_name(replica: str | None = None) -> str:
    """The file name of a verifier's transcript: one name per replica in a folder the fleet shares."""
    if replica is None:
        return UNNAMED_FILE
    if not REPLICA_NAME.fullmatch(replica):
        raise AuditError(
            f"a replica name is 1-64 letters, digits, '_' or '-' (first a letter or digit); got {replica!r}"
        )
    return f"server-transcript.{replica}.jsonl"


def transcript_files(directory: Path) -> list[Path]:
    """The transcripts in a folder of them (every replica's, `transcript_name`), in name order.

    Refuses (`AuditError`, one sentence) a folder that holds none: an auditor handed the wrong
    folder must not read that as "no stream of this device reached any replica"."""
    try:
        found = sorted(p for p in directory.iterdir() if _TRANSCRIPT_FILE.fullmatch(p.name))
    except OSError as exc:
        raise AuditError(f"cannot list transcript folder {directory}: {exc.strerror or exc}") from None
    if not found:
        raise AuditError(
            f"the folder {directory} holds no server transcript "
            "(server-transcript.jsonl or server-transcript.NAME.jsonl)"
        )
    return found


def _header(replica: str | None) -> dict[str, str]:
    return {"format": TRANSCRIPT_FORMAT} if replica is None else {"format": TRANSCRIPT_FORMAT, "replica": replica}


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def _is_name(v: object) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_DEVICE_NAME and v.isprintable()


class ServerTranscript:
    """Appends who sent each stream and the hash of every uplink; one writer per file, thread-safe."""

    def __init__(self, path: Path, fd: int, *, durable: bool, replica: str | None = None) -> None:
        self.path = path
        self.replica = replica
        self._fd = fd
        self._durable = durable
        self._lock = threading.Lock()  # orders the lines; guards the streams' counts
        self._counts: dict[str, int] = {}  # open streams and how many uplinks each has had
        self._known: set[str] = set()
        # Group commit: lines are written under `_lock`, and one fsync covers every line written
        # before it, so concurrent streams share fsyncs instead of queueing one each (~4 ms apiece).
        self._sync_lock = threading.Lock()
        self._written = 0  # lines written so far
        self._synced = 0  # lines known to be on disk

    @classmethod
    def open(cls, path: Path | str, *, durable: bool = True, replica: str | None = None) -> Self:
        """Open (or create) a transcript. `durable` fsyncs every line, so a crash loses none.
        `replica` names the verifier replica that writes it, in its header (`transcript_name`).

        Its folder must be writable by its owner only (`check_folder`)."""
        path = Path(path)
        if replica is not None:
            transcript_name(replica)  # refuses a name the header and the folder's listing could not carry
        check_folder(path.parent)
        exists = path.exists() and path.stat().st_size > 0
        header = json.dumps(_header(replica), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
        if exists:
            existing = read_transcript(path)
            first = path.read_bytes().split(b"\n", 1)[0]
            if first != header:
                # A restarted replica appends to its own file; another replica's would mix two
                # writers' streams under one name.
                theirs = not any(p.startswith("server transcript line 1 ") for p in existing.problems)
                whose = "an unnamed server's" if existing.replica is None else f"replica {existing.replica}'s"
                what = f"{whose} transcript, not this server's" if theirs else f"not a {TRANSCRIPT_FORMAT} file"
                raise AuditError(
                    f"the server transcript {path} is {what} (an older server's?): move it aside so this server "
                    "starts a new one"
                )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        transcript = cls(path, fd, durable=durable, replica=replica)
        with transcript._lock:
            if exists:
                transcript._known = set(existing.info)
                # A line torn by a crash stays as evidence (the auditor is told); new lines start clean.
                torn = not path.read_bytes().endswith(b"\n")
                written = transcript._write_raw(b"\n") if torn else 0
            else:
                written = transcript._write(_header(replica))
        transcript._sync(written)
        return transcript

    def _write(self, obj: Mapping[str, object]) -> int:
        return self._write_raw(
            json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
        )

    def _write_raw(self, data: bytes) -> int:
        """Write `data` (the caller holds `_lock`); return its ticket for `_sync`."""
        if self._fd < 0:
            raise AuditError(f"the server transcript {self.path} is closed")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._written += 1
        return self._written

    def _sync(self, ticket: int) -> None:
        """Return once the line with `ticket` is on disk (at once when not durable). Call it
        without holding `_lock`, so other streams go on writing lines while this one waits."""
        if not self._durable:
            return
        with self._sync_lock:
            if self._synced >= ticket:  # a fsync since that line covered it
                return
            with self._lock:
                target, fd = self._written, self._fd
            if fd < 0:
                raise AuditError(f"the server transcript {self.path} is closed")
            os.fsync(fd)
            self._synced = target

    def begin_stream(self, stream: str, device: str, cert_sha256: str) -> None:
        """A stream from the device whose verified client certificate is `device` / `cert_sha256` begins."""
        if not _STREAM.fullmatch(stream):
            raise AuditError(f"a stream name is 1-128 letters, digits or ._:-; got {stream!r}")
        if not _is_name(device) or not _HEX64.fullmatch(cert_sha256):
            raise AuditError("a stream's device is a printable name and the hex SHA-256 of its certificate")
        with self._lock:
            if stream in self._known:
                raise AuditError(f"stream {stream} already exists in the transcript")
            ticket = self._write({"stream": stream, "device": device, "cert_sha256": cert_sha256})
            self._known.add(stream)
            self._counts[stream] = 0
        self._sync(ticket)

    def record_uplink(self, stream: str, payload: bytes) -> None:
        with self._lock:
            i = self._counts.get(stream)
            if i is None:
                raise AuditError(f"stream {stream!r} was not begun (or has ended) in the transcript")
            line = {"stream": stream, "i": i, "len": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
            ticket = self._write(line)
            self._counts[stream] = i + 1
        self._sync(ticket)

    def end_stream(self, stream: str, outcome: str) -> None:
        """The server's witness statement: the stream is over after the uplinks recorded so far.

        A stream that was never begun here (its identity could not be recorded, so it was refused
        before any uplink) has nothing to witness: no line is written.
        """
        if not _OUTCOME.fullmatch(outcome):
            raise AuditError(f"a stream outcome is a short lowercase identifier; got {outcome!r}")
        with self._lock:
            count = self._counts.pop(stream, None)
            if count is None:
                return
            ticket = self._write({"stream": stream, "end": outcome, "uplinks": count})
        self._sync(ticket)

    def close(self) -> None:
        with self._sync_lock, self._lock:  # after a fsync under way, so none runs on a closed descriptor
            if self._fd >= 0:
                if self._durable and self._synced < self._written:  # lines whose writers did not wait
                    os.fsync(self._fd)
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
class Stream:
    """One stream as the server recorded it: who sent it, its uplinks, and how it ended."""

    name: str
    device: str
    cert_sha256: str
    line: int  # where it begins
    entries: list[TranscriptEntry] = field(default_factory=list)
    end: str | None = None  # the outcome, once the server wrote the stream's end
    source: int = 0  # which transcript file (of several replicas'): line numbers order only within one


@dataclass
class TornLine:
    """A line cut short by a crash: the prefix of one line the writer wrote (not JSON), kept by the
    restarted server, which starts its lines after it (`ServerTranscript.open`)."""

    line: int
    open_streams: frozenset[str]  # the streams begun and not ended before it: one of them may own it
    restarted: bool = True  # no stream open at the torn line wrote again after it (as after a restart)
    label: str = ""  # "transcript N: " when several transcripts are merged


@dataclass
class Transcript:
    streams: dict[str, list[TranscriptEntry]] = field(default_factory=dict)  # each stream's uplinks
    info: dict[str, Stream] = field(default_factory=dict)  # who sent each stream, and how it ended
    problems: list[str] = field(default_factory=list)
    torn: list[TornLine] = field(default_factory=list)  # judged per device by `compare`
    replica: str | None = None  # the replica its header names (None: unnamed, or several merged)
    sources: list[str] = field(default_factory=list)  # merged: each file's replica name (or its path)


def _parse_line(obj: object) -> str | None:
    """Which kind of transcript line `obj` is ("begin", "uplink", "end"), or None if it is none."""
    if not isinstance(obj, dict) or not isinstance(obj.get("stream"), str) or not _STREAM.fullmatch(obj["stream"]):
        return None
    keys = set(obj)
    if keys == {"stream", "device", "cert_sha256"}:
        ok = _is_name(obj["device"]) and isinstance(obj["cert_sha256"], str)
        return "begin" if ok and _HEX64.fullmatch(obj["cert_sha256"]) else None
    if keys == {"stream", "i", "len", "sha256"}:
        ok = _is_int(obj["i"]) and _is_int(obj["len"]) and isinstance(obj["sha256"], str)
        return "uplink" if ok and _HEX64.fullmatch(obj["sha256"]) else None
    if keys == {"stream", "end", "uplinks"}:
        ok = isinstance(obj["end"], str) and _is_int(obj["uplinks"])
        return "end" if ok and _OUTCOME.fullmatch(obj["end"]) else None
    return None


def _lines(handle: BinaryIO) -> Iterator[bytes]:
    """The file's lines without their newlines, each cut at MAX_LINE_BYTES (read in bounded pieces)."""
    while line := handle.readline(MAX_LINE_BYTES + 1):
        if line.endswith(b"\n"):
            yield line[:-1]
            continue
        head = line
        while line and not line.endswith(b"\n"):  # longer than any line the writer writes: skip the rest
            line = handle.readline(MAX_LINE_BYTES + 1)
        yield head


def read_transcript(path: Path) -> Transcript:
    with open_regular(Path(path), "the server transcript") as (handle, _):
        try:
            return _read_lines(_lines(handle))
        except OSError as exc:
            raise AuditError(f"cannot read the server transcript {path}: {exc.strerror or exc}") from None


def _read_lines(lines: Iterable[bytes]) -> Transcript:
    out = Transcript()
    open_streams: set[str] = set()
    number = 0
    for number, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            if number > 1 and _torn_prefix(raw):
                out.torn.append(TornLine(number, frozenset(open_streams)))
            else:
                out.problems.append(f"server transcript line {number} is not JSON")
            continue
        if number == 1:
            named = isinstance(obj, dict) and set(obj) == {"format", "replica"} and obj["format"] == TRANSCRIPT_FORMAT
            if named and isinstance(obj["replica"], str) and REPLICA_NAME.fullmatch(obj["replica"]):
                out.replica = obj["replica"]
            elif obj != {"format": TRANSCRIPT_FORMAT}:
                out.problems.append(
                    f"server transcript line 1 is not a {TRANSCRIPT_FORMAT} header (a transcript without "
                    "device identities cannot be compared per device)"
                )
            continue
        kind = _parse_line(obj)
        if kind is None:
            out.problems.append(f"server transcript line {number} is not a transcript entry")
            continue
        name = obj["stream"]
        stream = out.info.get(name)
        if kind == "begin":
            if stream is not None:
                out.problems.append(f"server transcript line {number}: stream {name} begins a second time")
                continue
            out.info[name] = Stream(name, obj["device"], obj["cert_sha256"], number)
            out.streams[name] = out.info[name].entries
            open_streams.add(name)
            continue
        if stream is None:
            out.problems.append(f"server transcript line {number}: stream {name} was never begun (no device for it)")
            continue
        if stream.end is not None:
            out.problems.append(f"server transcript line {number}: stream {name} continues after its end")
            continue
        for i, torn in enumerate(out.torn):
            if torn.restarted and name in torn.open_streams:
                out.torn[i] = replace(torn, restarted=False)  # the writer went on: no crash tore it
        if kind == "end":
            open_streams.discard(name)
            stream.end = obj["end"]
            if obj["uplinks"] != len(stream.entries):
                out.problems.append(
                    f"server transcript line {number}: stream {name} ends after {obj['uplinks']} uplinks but "
                    f"{len(stream.entries)} are recorded"
                )
            continue
        if obj["i"] != len(stream.entries):
            out.problems.append(
                f"server transcript line {number}: stream {name} message {obj['i']} follows "
                f"message {len(stream.entries) - 1} (a gap or reordering in the server's own record)"
            )
        stream.entries.append(TranscriptEntry(number, obj["sha256"]))
    if not number:
        out.problems.append("the server transcript is empty")
    return out


MAX_LINE_BYTES = 4096  # longer than any line the writer writes (a begin line: a 128-character name, escaped)


def _torn_prefix(raw: bytes) -> bool:
    """Whether `raw` can be the start of one line the writer wrote, cut short: ASCII JSON that opens
    an object and holds no second one (the writer escapes every '"' inside a value)."""
    return raw.startswith(b'{"') and len(raw) < MAX_LINE_BYTES and raw.isascii() and b'{"' not in raw[1:]


def merge(transcripts: Sequence[Transcript]) -> Transcript:
    """One view of several transcripts (e.g. of several verifier replicas); stream names must not clash."""
    out = Transcript()
    for i, t in enumerate(transcripts):
        out.problems += [f"transcript {i + 1}: {p}" for p in t.problems] if len(transcripts) > 1 else t.problems
        out.torn += [replace(x, label=f"transcript {i + 1}: " if len(transcripts) > 1 else "") for x in t.torn]
        for name, stream in t.info.items():
            if name in out.info:
                out.problems.append(f"stream {name} appears in two transcripts")
                continue
            out.info[name] = replace(stream, source=i)
            out.streams[name] = stream.entries
    return out


@dataclass(frozen=True)
class DeviceSession:
    """What the device logged for one session: its uplinks as (record index, sha256), how it ended,
    the certificate its log bound when the session began (None if it bound none), and the record
    index of its first downlink (None if it received none)."""

    session_id: str
    uplinks: Sequence[tuple[int, str]]
    fell_back: bool
    cert_sha256: str | None = None
    device: str | None = None  # the name the log binds with that certificate
    first_downlink: int | None = None
    closed: bool = False  # ended by its Close (then its last uplink)


@dataclass
class Comparison:
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: int = 0


MAX_STRAY_REPORTS = 100  # streams matching no session are each explained up to this many, then counted
MAX_ORDER_REPORTS = 5  # a reordered log names its first few reorderings; the rest are counted


def compare(
    device: Sequence[DeviceSession],
    transcript: Transcript,
    bindings: Iterable[tuple[str, str]] = (),
    *,
    device_name: str | None = None,
) -> Comparison:
    """Match each certificate's server streams to the device sessions bound to it, hash for hash and in order.

    `bindings` are the (name, certificate sha256) pairs of the log's `device-cert` records, sessions
    or none. Streams of other names are other devices' and none of this log's business; but every
    certificate the server saw under a name the log binds must be bound by the log, or the log
    could hide its device's streams behind a certificate record naming a made-up fingerprint.

    `device_name` is whose log this is by the auditor's own knowledge (the common name of the
    device's certificate). The log's records alone cannot say it: a log that names a device and a
    certificate of its own making would make every stream of the real device someone else's. So
    without it the log must bind a certificate the server saw, or the comparison fails.
    """
    result = Comparison(failures=list(transcript.problems))
    bound = list(dict.fromkeys([*bindings, *((d.device, d.cert_sha256) for d in device if d.device and d.cert_sha256)]))
    if device_name is not None:
        for name in sorted({n for n, _ in bound} - {device_name}):
            result.failures.append(
                f"the log binds device {name}, but it is the log of device {device_name}: a device's log binds "
                "its own certificates only"
            )
        result.notes.append(f"compared as the log of device {device_name}, with every stream the server saw from it")
    elif not {c for _, c in bound} & {s.cert_sha256 for s in transcript.info.values()}:
        named = ", ".join(f"{n} (certificate sha256 {c[:16]}…)" for n, c in bound) or "no device"
        result.failures.append(
            f"the log binds {named}, and the server saw no certificate of it, so nothing ties this log to the "
            "transcript's devices (a log can name a device and a certificate of its own making): name the "
            "device whose log this is (--device NAME, the common name of its certificate)"
        )
    certs = sorted({c for _, c in bound} | {d.cert_sha256 for d in device if d.cert_sha256 is not None})
    for d in device:
        if d.cert_sha256 is None and d.uplinks:
            result.failures.append(
                f"device session {d.session_id[:8]}… (uplinks from record {d.uplinks[0][0]}) began before the log "
                "bound a device certificate (no device-cert record), so no server stream can be attributed to it"
            )
    # The log's device names, and the auditor's: every certificate the server saw under them is ours.
    ours = {n for n, _ in bound} | ({device_name} if device_name is not None else set())
    _check_bindings(bound, ours, transcript, result)
    _check_torn(transcript, ours, set(certs), result)
    pairs: list[tuple[DeviceSession, Stream]] = []
    for cert in certs:
        streams = [s for s in transcript.info.values() if s.cert_sha256 == cert and s.entries]
        sessions = [d for d in device if d.cert_sha256 == cert]
        names = sorted({s.device for s in transcript.info.values() if s.cert_sha256 == cert})
        never = "" if names else "; the server never saw this certificate"
        names = names or sorted({n for n, c in bound if c == cert})
        who = f"device {', '.join(names) or '?'} (certificate sha256 {cert[:16]}…)"
        result.notes.append(f"compared with the {len(streams)} stream(s) the server received from {who}{never}")
        pairs += _compare_one(sessions, streams, who, result)
    _check_order(pairs, result)
    others = {s.cert_sha256 for s in transcript.info.values() if s.device not in ours} - set(certs)
    if others:
        n = sum(1 for s in transcript.info.values() if s.cert_sha256 in others)
        result.notes.append(
            f"{n} stream(s) of {len(others)} other certificate(s) were not compared with this log (they name "
            "other devices)"
        )
    return result


def _check_torn(transcript: Transcript, names: set[str], certs: set[str], result: Comparison) -> None:
    """A line torn by a crash is another device's business unless it can be this device's uplink.

    The writer writes a stream's begin line before any of its uplinks, so a torn line is a begin
    line (which records no uplink) or the uplink or end line of a stream open at that point. A
    crash ends every open stream: the restarted server writes nothing more for them. So a torn
    line that no stream of this device's names or certificates was open for cannot hide one of its
    uplinks: a note. It fails when such a stream was open (the lost line may be an uplink of it,
    whose hash nobody can check), or when a stream open at it wrote again after it (no crash
    then: the writer went on past a damaged line, which a restart explains no longer).
    """
    for torn in transcript.torn:
        where = f"{torn.label}server transcript line {torn.line}"
        if not torn.restarted:
            result.failures.append(
                f"{where} is not JSON, and streams open before it go on after it: not a line torn by a crash"
            )
            continue
        mine = sorted(
            n
            for n in torn.open_streams
            if transcript.info[n].device in names or transcript.info[n].cert_sha256 in certs
        )
        if mine:
            result.failures.append(
                f"{where} was torn by a crash while stream {', '.join(mine)} of this device was open: it may be "
                "an uplink of it that the server received, whose hash is lost"
            )
        else:
            result.notes.append(
                f"{where} was torn by a crash (the server restarted after it); no stream of this device was "
                "open then, so it holds none of this device's uplinks"
            )


def _check_bindings(
    bound: Sequence[tuple[str, str]], names: set[str], transcript: Transcript, result: Comparison
) -> None:
    """Every certificate the server saw under `names` (the log's device names and the auditor's) is
    bound, each under its own name."""
    certs = {c for _, c in bound}
    seen_as: dict[str, set[str]] = defaultdict(set)
    unbound: dict[tuple[str, str], list[Stream]] = defaultdict(list)
    for s in transcript.info.values():
        seen_as[s.cert_sha256].add(s.device)
        if s.device in names and s.cert_sha256 not in certs:
            unbound[(s.device, s.cert_sha256)].append(s)
    for name, cert in bound:
        for other in sorted(seen_as.get(cert, set()) - {name}):
            result.failures.append(
                f"the log binds certificate sha256 {cert[:16]}… to device {name}, but the server saw that "
                f"certificate as device {other}: a certificate has one name, so the log's device-cert record is false"
            )
    for (name, cert), streams in sorted(unbound.items()):
        uplinks = sum(len(s.entries) for s in streams)
        result.failures.append(
            f"the server received {len(streams)} stream(s) ({uplinks} uplink(s)) from device {name} with certificate "
            f"sha256 {cert[:16]}…, which this log never binds (from transcript line {streams[0].line}): a device's "
            "log records every certificate it uses, so its device-cert records were rewritten or it leaves out "
            "that certificate's sessions"
        )


def _check_order(pairs: Sequence[tuple[DeviceSession, Stream]], result: Comparison) -> None:
    """Fail where the log orders two matched sessions in a way the server's transcript rules out.

    The server records each uplink before it answers, and the device logs each uplink before it
    sends it and each downlink once it has arrived. So if session A's first downlink is logged
    before session B's first uplink, the server received A's first uplink before B's. Sessions
    that overlapped without such a downlink (concurrent ones) may reach the server in either order.
    """
    found: list[str] = []
    for source in sorted({s.source for _, s in pairs}):
        group = [(d, s) for d, s in pairs if s.source == source and d.uplinks]
        answered = sorted((p for p in group if p[0].first_downlink is not None), key=lambda p: p[0].first_downlink or 0)
        k = 0
        latest: tuple[DeviceSession, Stream] | None = None  # of the sessions answered so far, the latest at the server
        for later, stream in sorted(group, key=lambda p: p[0].uplinks[0][0]):
            start = later.uplinks[0][0]
            while k < len(answered) and (answered[k][0].first_downlink or 0) < start:
                if latest is None or answered[k][1].entries[0].line > latest[1].entries[0].line:
                    latest = answered[k]
                k += 1
            if latest is None or latest[1].entries[0].line < stream.entries[0].line:
                continue
            earlier, seen = latest
            found.append(
                f"device session {earlier.session_id[:8]}… received a downlink (record {earlier.first_downlink}) "
                f"before device session {later.session_id[:8]}… sent its first uplink (record {start}), yet the server "
                f"received stream {stream.name} (first uplink at transcript line {stream.entries[0].line}) before "
                f"stream {seen.name} (line {seen.entries[0].line}): the sessions were reordered in the log"
            )
    result.failures += found[:MAX_ORDER_REPORTS]
    if len(found) > MAX_ORDER_REPORTS:
        result.failures.append(f"{len(found) - MAX_ORDER_REPORTS} more session(s) are out of the server's order")


def _compare_one(
    device: Sequence[DeviceSession], streams: Sequence[Stream], who: str, result: Comparison
) -> list[tuple[DeviceSession, Stream]]:
    """Match sessions to streams and record what does not match; return the pairs that can be ordered.

    Streams with identical uplinks that were matched to several sessions (one prompt run twice
    with the same parameters) are not returned: which stream is whose, and so their order, is
    unknown.
    """
    ordered = sorted((d for d in device if d.uplinks), key=lambda d: d.uplinks[0][0])
    # Insertion-ordered "set" of the sessions not yet matched, and an index by first uplink hash: a
    # stream can only be a prefix of (or explained by) a session that begins with its first uplink.
    # So matching stays linear however many streams are strays.
    unmatched: dict[str, DeviceSession] = {d.session_id: d for d in ordered}
    by_first: dict[str, list[DeviceSession]] = defaultdict(list)
    by_hashes: dict[tuple[str, ...], list[DeviceSession]] = defaultdict(list)
    for d in ordered:
        by_hashes[tuple(h for _, h in d.uplinks)].append(d)
        by_first[d.uplinks[0][1]].append(d)

    def candidates(key: tuple[str, ...]) -> list[DeviceSession]:
        return [d for d in by_first.get(key[0], ()) if d.session_id in unmatched]

    pairs: list[tuple[DeviceSession, Stream]] = []
    leftovers: list[Stream] = []
    for stream in sorted(streams, key=lambda s: (s.source, s.entries[0].line)):
        key = tuple(e.sha256 for e in stream.entries)
        if by_hashes.get(key):
            d = by_hashes[key].pop(0)
            del unmatched[d.session_id]
            pairs.append((d, stream))
            result.matched += 1
        else:
            leftovers.append(stream)
    strays = 0
    for stream in leftovers:
        key = tuple(e.sha256 for e in stream.entries)
        # A device that fell back may have logged uplinks that never arrived: a prefix is fine then.
        near = candidates(key)
        prefix = next((d for d in near if d.fell_back and _starts_with(d, key)), None)
        if prefix is not None:
            del unmatched[prefix.session_id]
            pairs.append((prefix, stream))
            result.matched += 1
            result.notes.append(
                f"server stream {stream.name} received {len(key)} of the {len(prefix.uplinks)} uplinks of device "
                f"session {prefix.session_id[:8]}… (which fell back)"
            )
            continue
        # A session that closed may have logged and sent its Close after the server ended the stream
        # (an idle timeout after the last verdict, a restart): the server then holds every uplink
        # but that final Close. The log holds more than the server received, never less: a note.
        lost = next((d for d in near if _lost_close(d, key)), None)
        if lost is not None:
            del unmatched[lost.session_id]
            pairs.append((lost, stream))
            result.matched += 1
            ended = f"ended: {stream.end}" if stream.end is not None else "no end recorded"
            result.notes.append(
                f"server stream {stream.name} ({ended}) received every uplink of device session "
                f"{lost.session_id[:8]}… but its final Close (record {lost.uplinks[-1][0]}): the stream was over "
                "before the Close arrived (the log holds more than the server received, not less)"
            )
            continue
        strays += 1
        if strays <= MAX_STRAY_REPORTS:
            result.failures.append(_explain_stray(stream, near, who))
    if strays > MAX_STRAY_REPORTS:
        result.failures.append(
            f"{strays - MAX_STRAY_REPORTS} more server stream(s) from {who} match no session of this log"
        )
    for d in unmatched.values():
        first = d.uplinks[0][0]
        if d.fell_back and d.first_downlink is None:
            result.notes.append(f"device session {d.session_id[:8]}… fell back; the server has no stream for it")
        elif d.fell_back:
            # The server records uplinks before it answers them, so an answered session has a stream.
            result.failures.append(
                f"device session {d.session_id[:8]}… (uplinks from record {first}) fell back after a downlink "
                f"(record {d.first_downlink}), yet the server has no matching record of its uplinks from {who}"
            )
        else:
            result.failures.append(
                f"device session {d.session_id[:8]}… (uplinks from record {first}) closed normally but the server "
                f"has no matching record of its {len(d.uplinks)} uplinks from {who}"
            )
    streams_per_key = Counter(tuple(e.sha256 for e in s.entries) for _, s in pairs)
    return [(d, s) for d, s in pairs if streams_per_key[tuple(e.sha256 for e in s.entries)] == 1]


def _lost_close(session: DeviceSession, hashes: tuple[str, ...]) -> bool:
    """`hashes` are all of a closed session's uplinks but its final one, the Close."""
    return session.closed and len(session.uplinks) == len(hashes) + 1 and _starts_with(session, hashes)


def _starts_with(session: DeviceSession, hashes: tuple[str, ...]) -> bool:
    return tuple(h for _, h in session.uplinks[: len(hashes)]) == hashes


def _explain_stray(stream: Stream, device: Sequence[DeviceSession], who: str) -> str:
    """Name the first message the server received that the device never logged."""
    entries = stream.entries
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
            what = (
                "the device logged a different uplink there"
                if best_len < len(best.uplinks)
                else "the device's log ends that session before it"
            )
            return (
                f"server stream {stream.name}: message {best_len} (transcript line {e.line}, sha256 {e.sha256[:16]}…) "
                f"was received from {who} but {what} (device session {best.session_id[:8]}…, after record "
                f"{best.uplinks[best_len - 1][0]})"
            )
        return (
            f"server stream {stream.name} received only {len(entries)} of the {len(best.uplinks)} uplinks of device "
            f"session {best.session_id[:8]}…, which closed normally (first missing: record {best.uplinks[best_len][0]})"
        )
    e = entries[0]
    ended = f"ended: {stream.end}" if stream.end is not None else "no end recorded"
    return (
        f"server stream {stream.name} ({len(entries)} uplink(s) from {who}, {ended}; transcript line {e.line}) "
        "matches no session in this log: the log is shorter than what the server witnessed (records removed or "
        "rolled back), or egress that bypassed the audit log"
    )
