"""The append-only audit log: framed records in segments, a Merkle tree over them, signed checkpoints.

Layout of a log directory (created 0700; files 0600):

    segments/seg-<first index, 12 digits>.log   frames, rotated every `segment_records` records
    checkpoints.jsonl                           one {"note": "<C2SP signed checkpoint>"} per line
    torn/                                       bytes cut from a torn tail, kept as evidence
    lock                                        held (flock; on Linux also an OFD lock) by the one process appending

A frame is `length (4 bytes, big-endian) || record || SHA-256(0x00 || record)`: the trailer is the
record's RFC 9162 leaf hash, so a damaged record names itself and the tree needs no second pass.
Records are canonical JSON (`audit.records`); record 0 is the log header with the verifier key,
record 1 (on a device with a certificate) binds that key to the device's mTLS certificate.

Crash safety: `append` returns only after the frame is written and fsync'ed (and the directory, when
it made a file), so an acknowledged record survives a crash. A crash mid-append can leave a torn
final frame; `AuditLog.open` cuts it back to the last complete record, moves the cut bytes to
`torn/`, and appends a `repair` record saying so, so the cut is never silent. Only one frame at the
very end of the last segment can be torn (`_torn_reason`, decided without searching the tail, so
a hostile tail costs linear work); damage anywhere else, or to a record a checkpoint already
signed, is not a crash and is refused (`LogCorruptError`). A checkpoint is signed at every
session's end, on open and on close, so an honest log has no unsigned tail once reopened.
Sessions left unfinished by a dead process are closed with a `fallback` record ("interrupted").
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, NoReturn, Self

from google.protobuf.message import DecodeError

from specsteer.audit import merkle, records
from specsteer.audit.cosignature import WitnessKey, cosignatures
from specsteer.audit.errors import AuditError, KeyFileError, LogCorruptError, LogHandedOver
from specsteer.audit.files import open_regular
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.note import (
    MAX_NOTE_BYTES,
    NoteError,
    SigningKey,
    VerifierKey,
    open_checkpoint,
    parse_note,
    sign_checkpoint,
)
from specsteer.audit.note import Checkpoint as CheckpointBody
from specsteer.audit.rotation import KeyChain, handover_message, key_chain
from specsteer.core.fileio import fsync_folder
from specsteer.core.session_types import WIRE_MAX_TOP_K
from specsteer.core.wire import pb

SEGMENTS_DIR = "segments"
CHECKPOINTS_FILE = "checkpoints.jsonl"
TORN_DIR = "torn"
LOCK_FILE = "lock"
# struct flock (l_type, l_whence, l_start, l_len, l_pid), native layout: the whole file.
_WHOLE_FILE_WRITE_LOCK = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


def _lock_description(fd: int) -> None:
    """Beside the flock, on Linux, an open-file-description write lock on the whole lock file:
    the lock the TypeScript writer takes (Node has no flock; sdk-js/src/node/files.ts locks with
    fs-native-extensions, fcntl F_OFD_SETLK on Linux), so a Python and a TypeScript device exclude
    each other. Linux keeps flock and fcntl locks apart, hence both; elsewhere the TypeScript writer
    uses flock. Raises OSError (EAGAIN or EACCES) when another writer holds it; released with `fd`."""
    if hasattr(fcntl, "F_OFD_SETLK"):
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _WHOLE_FILE_WRITE_LOCK)


SEGMENT_RE = re.compile(r"seg-([0-9]{12})\.log")
HEADER = struct.Struct(">I")
TRAILER_SIZE = 32
MAX_RECORD_BYTES = 2 * records.MAX_PAYLOAD_BYTES  # base64 and JSON around the largest payload
DEFAULT_SEGMENT_RECORDS = 4096
MAX_PROBLEMS = 100  # damage past this many places in the log is not read any further
INTERRUPTED = "interrupted"


def segment_name(first_index: int) -> str:
    return f"seg-{first_index:012d}.log"


# -- reading (shared by the writer's recovery and the auditor's read-only verify) ---------------


@dataclass(frozen=True)
class StoredRecord:
    position: int  # where it sits in the log; its `index` field must say the same
    segment: str
    offset: int
    data: bytes
    leaf: bytes  # leaf_hash(data), recomputed
    checksum_ok: bool  # the stored trailer matched

    def where(self) -> str:
        return f"record {self.position} ({self.segment} at byte {self.offset})"


@dataclass(frozen=True)
class TornTail:
    file: str  # path relative to the log directory
    offset: int
    length: int
    reason: str


@dataclass(frozen=True)
class StoredCheckpoint:
    number: int  # line number in checkpoints.jsonl, from 0
    note: str


@dataclass
class LogScan:
    """Everything read from a log directory, damage included; nothing is repaired here."""

    directory: Path
    records: list[StoredRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # damage a crash cannot explain
    torn: list[TornTail] = field(default_factory=list)
    checkpoints: list[StoredCheckpoint] = field(default_factory=list)


class _Segment:
    """A segment file read frame by frame (never whole: a segment can be any size on disk)."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self._handle = handle
        self.size = size

    def read(self, offset: int, n: int) -> bytes:
        self._handle.seek(offset)
        return self._handle.read(n)

    def all_zero(self, offset: int) -> bool:
        """Whether every byte from `offset` to the end is zero (read in bounded chunks)."""
        self._handle.seek(offset)
        while chunk := self._handle.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
        return True


def _frame_at(seg: _Segment, offset: int) -> tuple[int, bytes, bytes] | None:
    """(end, record, trailer) of the complete frame at `offset`, or None if it runs past the end
    (or declares a length no writer produces: the frame header itself is then damaged)."""
    head = seg.read(offset, HEADER.size)
    if len(head) < HEADER.size:
        return None
    (length,) = HEADER.unpack(head)
    end = offset + HEADER.size + length + TRAILER_SIZE
    if length > MAX_RECORD_BYTES or end > seg.size:
        return None
    body = seg.read(offset + HEADER.size, length + TRAILER_SIZE)
    if len(body) < length + TRAILER_SIZE:  # the file shrank while it was read
        return None
    return end, body[:length], body[length:]


def _torn_reason(seg: _Segment, offset: int) -> str | None:
    """Why the bytes from `offset` to the end are one torn final write, or None if they are not.

    The writer appends each frame in one write and fsyncs it, so a crash leaves at most one frame
    cut short: fewer than its declared bytes, a final frame of exactly its declared size whose
    pages did not all land, or a zero-filled extension. Anything else behind a bad frame (more
    bytes than one frame, a length no writer produces) is damage. Decided in constant time plus
    one pass over the tail, so a hostile tail costs no more than reading it.
    """
    rest = seg.size - offset
    if seg.all_zero(offset):
        return "a final write that never reached the disk (zero-filled)"
    if rest < HEADER.size:
        return "an incomplete frame header"
    (length,) = HEADER.unpack(seg.read(offset, HEADER.size))
    if length > MAX_RECORD_BYTES:
        return None
    end = offset + HEADER.size + length + TRAILER_SIZE
    if end > seg.size:
        return "an incomplete frame"
    if end == seg.size:
        return "a final frame whose checksum does not match"
    return None


def _scan_segment(scan: LogScan, name: str, seg: _Segment, *, last: bool) -> None:
    offset = 0
    while offset < seg.size:
        frame = _frame_at(seg, offset)
        position = len(scan.records)
        if frame is None or merkle.leaf_hash(frame[1]) != frame[2]:
            # A crash tears only the final write: only the last segment's last frame can be torn,
            # and only in a log with no damage before it.
            reason = _torn_reason(seg, offset) if last and not scan.problems else None
            if reason is not None:
                scan.torn.append(TornTail(f"{SEGMENTS_DIR}/{name}", offset, seg.size - offset, reason))
                return
            if frame is None:
                scan.problems.append(
                    f"record {position} ({name} at byte {offset}): the frame is damaged and the rest of the "
                    f"segment ({seg.size - offset} bytes) cannot be read"
                )
                return
            end, data, _ = frame
            if len(scan.problems) >= MAX_PROBLEMS:
                # A segment of garbage frames (a sparse file of zeros) would otherwise cost a record and a
                # message per 36 bytes: the log already fails, so the rest is not read.
                scan.problems.append(
                    f"record {position} ({name} at byte {offset}) and the rest of the segment "
                    f"({seg.size - offset} bytes) were not read: the segment is already damaged in "
                    f"{MAX_PROBLEMS} places"
                )
                return
            scan.records.append(StoredRecord(position, name, offset, data, merkle.leaf_hash(data), False))
            scan.problems.append(
                f"record {position} ({name} at byte {offset}): checksum mismatch, its bytes were altered"
            )
            offset = end
            continue
        end, data, trailer = frame
        scan.records.append(StoredRecord(position, name, offset, data, trailer, True))
        offset = end


# A checkpoints.jsonl line: {"note": "<note>"}, the note escaped as JSON (at most 6 bytes a character).
MAX_CHECKPOINT_LINE = 6 * MAX_NOTE_BYTES + 16


def _read_checkpoints(scan: LogScan) -> None:
    path = scan.directory / CHECKPOINTS_FILE
    if not os.path.lexists(path):
        return
    with open_regular(path, "the checkpoints file", follow=False) as (handle, _):
        offset = 0
        number = 0
        while line := handle.readline(MAX_CHECKPOINT_LINE + 1):
            if not line.endswith(b"\n"):
                if len(line) <= MAX_CHECKPOINT_LINE:
                    # The newline is the last byte written, so a line without one is a checkpoint torn by a crash.
                    scan.torn.append(TornTail(CHECKPOINTS_FILE, offset, len(line), "an incomplete checkpoint line"))
                    return
                # Longer than any entry: skip to the end of the line (in bounded reads).
                while line and not line.endswith(b"\n"):
                    offset += len(line)
                    line = handle.readline(MAX_CHECKPOINT_LINE + 1)
                scan.problems.append(f"checkpoint {number} ({CHECKPOINTS_FILE}) is longer than any valid entry")
                if not line:
                    return
                number += 1
                offset += len(line)
                continue
            try:
                obj = json.loads(line[:-1].decode("utf-8"))
                if not isinstance(obj, dict) or set(obj) != {"note"} or not isinstance(obj["note"], str):
                    raise ValueError("not a checkpoint entry")
            except (UnicodeDecodeError, ValueError, RecursionError):
                scan.problems.append(f"checkpoint {number} ({CHECKPOINTS_FILE} at byte {offset}) is not a valid entry")
            else:
                scan.checkpoints.append(StoredCheckpoint(number, obj["note"]))
            number += 1
            offset += len(line)


def scan_log(directory: Path) -> LogScan:
    """Read a log directory without changing it. Raises only if it is not a log at all."""
    directory = Path(directory)
    seg_dir = directory / SEGMENTS_DIR
    if not seg_dir.is_dir():
        raise AuditError(f"{directory} is not an audit log (no {SEGMENTS_DIR}/ folder)")
    scan = LogScan(directory)
    names = sorted(p.name for p in seg_dir.iterdir())
    segments = [n for n in names if SEGMENT_RE.fullmatch(n)]
    for stray in sorted(set(names) - set(segments)):
        scan.problems.append(f"{SEGMENTS_DIR}/{stray} is not a segment of this log")
    for i, name in enumerate(segments):
        first = int(SEGMENT_RE.fullmatch(name).group(1))  # type: ignore[union-attr]
        if first != len(scan.records):
            missing = (
                f"records {len(scan.records)} to {first - 1} are missing"
                if first > len(scan.records)
                else "it overlaps the previous segment"
            )
            scan.problems.append(
                f"segment {name} starts at record {first} but the log before it holds "
                f"{len(scan.records)} records: {missing}"
            )
        last = i == len(segments) - 1
        with open_regular(seg_dir / name, "the segment", follow=False) as (handle, size):
            if not size and not last:
                scan.problems.append(f"segment {name} is empty but is not the last segment")
            _scan_segment(scan, name, _Segment(handle, size), last=last)
    _read_checkpoints(scan)
    return scan


_EVIDENCE_RE = re.compile(r"([A-Za-z0-9._-]{1,64})\.([0-9]{1,19})\.([0-9a-f]{64})\.bin")


@dataclass(frozen=True)
class TornEvidence:
    """Bytes cut from a torn tail, kept as torn/<file>.<offset>.<sha256>.bin."""

    name: str
    file: str
    offset: int
    sha256: str
    length: int
    intact: bool  # the content still hashes to the name


def torn_evidence(directory: Path) -> list[TornEvidence]:
    torn_dir = Path(directory) / TORN_DIR
    if not os.path.lexists(torn_dir):
        return []
    if torn_dir.is_symlink() or not torn_dir.is_dir():
        raise AuditError(f"{torn_dir} is not a folder: the log keeps its torn bytes in a folder {TORN_DIR}/")
    out = []
    for path in sorted(torn_dir.iterdir()):
        m = _EVIDENCE_RE.fullmatch(path.name)
        digest = hashlib.sha256()
        length = 0
        with open_regular(path, "the torn-write evidence", follow=False) as (handle, _):
            # Hashed in bounded chunks: a cut is one frame or a zero-filled tail, of any length on disk.
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                length += len(chunk)
        if m is None:
            out.append(TornEvidence(path.name, "", 0, "", length, False))
            continue
        out.append(
            TornEvidence(path.name, m.group(1), int(m.group(2)), m.group(3), length, digest.hexdigest() == m.group(3))
        )
    return out


def _is_close(payload: bytes) -> bool:
    try:
        return pb.Uplink.FromString(payload).WhichOneof("kind") == "close"
    except DecodeError:
        return False


# -- writing -------------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@dataclass
class _SessionEntry:
    next_n: int = 1
    ended: bool = False


class AuditLog:
    """The device's log. One process appends at a time (a lock file enforces it); appends are thread-safe.

    `open` creates the log on first use (record 0 declares `key`'s verifier key and the protocol's
    maximum k) and otherwise recovers it: torn tails are cut and recorded, orphaned sessions closed,
    and a checkpoint signed.
    """

    def __init__(self, directory: Path, key: SigningKey, *, segment_records: int) -> None:
        self.directory = directory
        self.key = key
        self.segment_records = segment_records
        self._lock = threading.RLock()
        self._leaves: list[bytes] = []
        self._acc = merkle.Accumulator()
        self._sessions: dict[str, _SessionEntry] = {}
        self._seg_fd: int | None = None
        self._seg_first = 0
        self._lock_fd: int | None = None
        self._broken: str | None = None
        self._latest: tuple[int, bytes, str] | None = None  # size, root, note
        self._cosigned: tuple[int, bytes] | None = None  # size, root of the largest checkpoint a witness cosigned
        self.repairs: list[TornTail] = []
        self.interrupted: list[str] = []
        self.device: DeviceIdentity | None = None  # the certificate the log's latest device-cert record binds
        self.witness_key: WitnessKey | None = None  # the witness whose cosignatures the log proves from
        # The witness policy's other keys: each witness's largest cosigned checkpoint, proved from by
        # the next add-checkpoint sent to it (audit.witness_client).
        self.policy_keys: tuple[WitnessKey, ...] = ()
        self._cosigned_by: dict[WitnessKey, tuple[int, bytes]] = {}
        self._chain = KeyChain(key.verifier)  # the key in force at each size (audit.rotation)
        self.last_appended: tuple[int, float] | None = None  # index and time (Unix seconds) of the newest record

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path | str,
        key: SigningKey,
        *,
        segment_records: int = DEFAULT_SEGMENT_RECORDS,
        device: DeviceIdentity | None = None,
        witness_key: WitnessKey | None = None,
        policy_keys: Sequence[WitnessKey] = (),
    ) -> Self:
        """Open (or create) the log; `device` binds the log key to the device's mTLS certificate.

        The binding is a `device-cert` record (record 1 of a new log) and is appended again when
        the certificate changes, so `audit verify` compares each session only with the server's
        streams from the certificate in force when the session began.

        `witness_key` is the verifier's witness key (`server witness-key`'s .pub): only a checkpoint
        whose cosignature verifies under it is kept as cosigned and proved from by the next Close.
        Without it no cosignature is trusted, and every Close proves from size 0 (which the witness
        cosigns only the first time). `policy_keys` are the witness policy's keys: a checkpoint
        cosigned by one of them is kept as that witness's latest (`cosigned_by`).
        """
        if segment_records < 1:
            raise AuditError("segment_records must be at least 1")
        directory = Path(directory)
        log = cls(directory, key, segment_records=segment_records)
        log.witness_key = witness_key
        log.policy_keys = tuple(policy_keys)
        if (
            directory.exists()
            and not (directory / SEGMENTS_DIR).exists()
            and any(p.name != LOCK_FILE for p in directory.iterdir())
        ):
            raise AuditError(f"{directory} exists, is not empty, and is not an audit log")
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            log._take_lock()
            # Decided under the lock: another process may have created the log since we looked.
            fresh = not (directory / SEGMENTS_DIR).exists()
            if fresh:
                log._create()
            else:
                log._recover()
            if device is not None and device != log.device:
                log.append(records.KIND_DEVICE, {"device": device.name, "cert_sha256": device.cert_sha256})
                log.device = device
            if log._latest is None or log._latest[0] != log.size:
                log.checkpoint()
        except BaseException:
            log._release()
            raise
        return log

    def _take_lock(self) -> None:
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _lock_description(fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise AuditError(f"the audit log {self.directory} is open in another process") from None
            raise
        self._lock_fd = fd

    def _create(self) -> None:
        (self.directory / SEGMENTS_DIR).mkdir(mode=0o700, exist_ok=True)
        fsync_folder(self.directory)
        fsync_folder(self.directory.resolve().parent)
        self._open_segment(0)
        self.append(
            records.KIND_HEADER,
            {
                "format": records.LOG_FORMAT,
                "origin": self.key.name,
                "key": str(self.key.verifier),
                "max_top_k": WIRE_MAX_TOP_K,
            },
        )

    def _recover(self) -> None:
        scan = scan_log(self.directory)
        if scan.problems:
            raise LogCorruptError(f"the audit log {self.directory} is damaged: {scan.problems[0]}")
        if not scan.records and not scan.checkpoints:
            # A crash while creating the log, before its header was acknowledged: finish creating it.
            for torn in scan.torn:
                self._cut(torn)
            self._create()
            self._record_repairs([])
            return
        parsed: list[records.Record] = []
        for stored in scan.records:
            try:
                rec = records.parse(stored.data)
            except records.RecordError as exc:
                raise LogCorruptError(f"{stored.where()} is not a valid record: {exc}") from None
            if rec.index != stored.position:
                raise LogCorruptError(f"{stored.where()} says it is record {rec.index}")
            parsed.append(rec)
            self._leaves.append(stored.leaf)
            self._acc.append(stored.leaf)
        if not parsed or parsed[0].kind != records.KIND_HEADER:
            raise LogCorruptError(f"the audit log {self.directory} has no header record")
        declared = parsed[0].fields["key"]
        try:
            chain, problems = key_chain(VerifierKey.parse(declared), enumerate(parsed))
        except AuditError as exc:
            raise LogCorruptError(f"the audit log's header key is unusable: {exc}") from None
        if problems:
            raise LogCorruptError(f"the audit log's key rotation does not verify: {problems[0]}")
        self._chain = chain
        if str(chain.current) != str(self.key.verifier):
            self._refuse_other_key(scan)
        for rec in parsed:
            self._track(rec.kind, rec.session, rec.payload)
            if rec.kind == records.KIND_DEVICE:
                self.device = DeviceIdentity(rec.fields["device"], rec.fields["cert_sha256"])
        self._load_latest_checkpoint(scan)
        # Only now, with the log known to be ours and otherwise intact, is a torn tail cut.
        for torn in scan.torn:
            self._cut(torn)
        # The last segment file by name: it may be empty (a crash right after rotating), and then it
        # already starts at the next index (scan_log checked that).
        last_segment = max(p.name for p in (self.directory / SEGMENTS_DIR).iterdir())
        self._open_segment(int(SEGMENT_RE.fullmatch(last_segment).group(1)))  # type: ignore[union-attr]
        self._record_repairs([r for r in parsed if r.kind == records.KIND_REPAIR])
        for session, entry in list(self._sessions.items()):
            if not entry.ended:
                # The process that ran this session is gone (we hold the lock), so it ended here.
                self.append_session(records.KIND_FALLBACK, session, {"reason": INTERRUPTED})
                self.interrupted.append(session)

    def _refuse_other_key(self, scan: LogScan) -> NoReturn:
        """Refuse a key that is not the one in force; the key the last rotation handed over from
        first finishes that handover if a crash cut it short (`rotate_key`: record, then checkpoint).

        Only the old key can sign the checkpoint over its handover (size P+1), so a rotation
        interrupted between the two is completed here, when `audit rotate-key` (or the app) runs
        again with the old key, and the caller learns the log is the new key's (`LogHandedOver`).
        """
        refused = f"the audit log {self.directory} belongs to key {self._chain.current}, not {self.key.verifier}"
        if not self._chain.rotations:
            raise KeyFileError(refused)
        position, new = self._chain.rotations[-1]
        if str(self._chain.key_for(position + 1)) != str(self.key.verifier):
            raise KeyFileError(refused)
        self._load_latest_checkpoint(scan)  # the old key signs over intact, checkpointed records only
        if self.size == position + 1 and (self._latest is None or self._latest[0] != self.size):
            for torn in scan.torn:  # a torn checkpoint line must go before a line is appended after it
                self._cut(torn)  # the new key's next open records the repair (`_record_repairs`)
            self.checkpoint()
            refused += f": the interrupted handover at record {position} is now complete"
        else:
            refused += f": it was handed over at record {position}"
        raise LogHandedOver(f"{refused}; open it with the new key", position, new)

    def _record_repairs(self, logged: Sequence[records.Record]) -> None:
        """Append a repair record for every cut kept under torn/ that the log does not yet mention.

        Driven by the evidence files, not by this run's cuts, so a crash between a cut and its
        record is caught up on the next open instead of leaving the cut silent.
        """
        done = {(r.fields["file"], r.fields["offset"], r.fields["cut_sha256"]) for r in logged}
        for ev in torn_evidence(self.directory):
            if not ev.intact:
                raise LogCorruptError(f"{TORN_DIR}/{ev.name} does not hash to the value in its name")
            if (ev.file, ev.offset, ev.sha256) not in done:
                fields = {"file": ev.file, "offset": ev.offset, "cut_bytes": ev.length, "cut_sha256": ev.sha256}
                self.append(records.KIND_REPAIR, fields)

    def _cut(self, torn: TornTail) -> None:
        """Cut a torn tail back to the last complete record, keeping the cut bytes under torn/."""
        path = self.directory / torn.file
        with path.open("r+b") as f:
            torn_dir = self.directory / TORN_DIR
            torn_dir.mkdir(mode=0o700, exist_ok=True)
            # Hashed, then copied, in bounded chunks (a zero-filled tail can be long): the content hash
            # in the name keeps two cuts at one offset (two crashes) apart.
            digest = hashlib.sha256()
            f.seek(torn.offset)
            while chunk := f.read(1 << 20):
                digest.update(chunk)
            keep = torn_dir / f"{path.name}.{torn.offset}.{digest.hexdigest()}.bin"
            fd = os.open(keep, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                f.seek(torn.offset)
                while chunk := f.read(1 << 20):
                    _write_all(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_folder(torn_dir)
            f.truncate(torn.offset)
            f.flush()
            os.fsync(f.fileno())
        self.repairs.append(torn)

    def _load_latest_checkpoint(self, scan: LogScan) -> None:
        self._load_cosigned(scan)
        for stored in reversed(scan.checkpoints):
            try:
                cp = self._open(stored.note)
            except NoteError as exc:
                raise LogCorruptError(f"checkpoint {stored.number} of the audit log does not verify: {exc}") from None
            if cp.size <= len(self._leaves) and merkle.root(self._leaves[: cp.size]) == cp.root:
                self._latest = (cp.size, cp.root, stored.note)
                return
            torn = next((t for t in scan.torn if t.file.startswith(SEGMENTS_DIR)), None)
            if cp.size > len(self._leaves) and torn is not None:
                raise LogCorruptError(
                    f"checkpoint {stored.number} signs {cp.size} records but only {len(self._leaves)} are intact: "
                    f"the damage at byte {torn.offset} of {torn.file} is to a signed record, not a torn write, so "
                    "the log is left as it is (restore it from a copy, e.g. an `audit export` bundle)"
                )
            raise LogCorruptError(f"checkpoint {stored.number} (size {cp.size}) does not match the stored records")

    def _load_cosigned(self, scan: LogScan) -> None:
        """The largest stored checkpoint that carries a valid cosignature by the log's witness key.

        A cosignature the device cannot check (no witness key, or one that does not verify under
        it) is never proved from: one bad answer would otherwise make the witness refuse every
        later Close (its proof would start from a size the witness never cosigned).
        """
        for stored in scan.checkpoints:
            try:
                cp = self._open(stored.note)
            except NoteError:
                continue  # the newest-first pass below refuses a checkpoint that does not verify
            if cp.size > len(self._leaves):
                continue
            if self._cosigned_by_witness(stored.note) and (self._cosigned is None or cp.size > self._cosigned[0]):
                self._cosigned = (cp.size, cp.root)
            for key in self._all_keys():
                if _cosigned_by(stored.note, key):
                    self._note_cosigned(key, cp.size, cp.root)

    def _open(self, note: str) -> CheckpointBody:
        """A checkpoint note of this log, verified under the key in force at its size."""
        size = CheckpointBody.parse_body(parse_note(note).text).size
        return open_checkpoint(note, self._chain.key_for(size))

    def rotate_key(self, new: SigningKey) -> int:
        """Hand the log to `new` (same name): a key-rotation record signed by the key in force, a
        checkpoint over it signed by that key, then every later checkpoint by `new`. Returns the
        record's index. The old key is no longer needed (or to be kept) once this returns."""
        with self._lock:
            if new.name != self.key.name:
                raise KeyFileError(f"the new log key is named {new.name!r}; the log's name is {self.key.name!r}")
            if str(new.verifier) == str(self.key.verifier):
                raise KeyFileError("the new log key is the key in force")
            position = self.size
            message = handover_message(self.key.verifier, new.verifier, position)
            signature = base64.b64encode(self.key.sign(message)).decode()
            index = self.append(records.KIND_ROTATION, {"key": str(new.verifier), "signature": signature})
            try:
                self.checkpoint()  # the old key's last word covers the handover
            finally:
                # The durable record hands the log over whether or not this checkpoint was stored.
                self._chain.rotations.append((position, new.verifier))
                self.key = new
            return index

    def _all_keys(self) -> tuple[WitnessKey, ...]:
        return tuple(dict.fromkeys((*([self.witness_key] if self.witness_key else []), *self.policy_keys)))

    def _note_cosigned(self, key: WitnessKey, size: int, root: bytes) -> None:
        held = self._cosigned_by.get(key)
        if held is None or size > held[0]:
            self._cosigned_by[key] = (size, root)

    def cosigned_by(self, key: WitnessKey) -> tuple[int, bytes] | None:
        """(size, root) of the largest checkpoint of this log `key`'s witness cosigned, if any."""
        with self._lock:
            return self._cosigned_by.get(key)

    def _cosigned_by_witness(self, note: str) -> bool:
        if self.witness_key is None:
            return False
        try:
            return bool(cosignatures(note, self.witness_key))
        except NoteError:
            return False

    def _open_segment(self, first: int) -> None:
        if self._seg_fd is not None:
            os.close(self._seg_fd)
            self._seg_fd = None
        seg_dir = self.directory / SEGMENTS_DIR
        path = seg_dir / segment_name(first)
        created = not path.exists()
        self._seg_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._seg_first = first
        if created:
            fsync_folder(seg_dir)

    def _track(self, kind: str, session: str | None, payload: bytes | None) -> None:
        if session is None:
            return
        if kind == records.KIND_BEGIN:
            self._sessions[session] = _SessionEntry()
            return
        entry = self._sessions.setdefault(session, _SessionEntry())
        entry.next_n += 1
        if kind == records.KIND_FALLBACK or (
            kind == records.KIND_UPLINK and payload is not None and _is_close(payload)
        ):
            entry.ended = True

    # -- appending -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self._leaves)

    @property
    def leaf_hashes(self) -> Sequence[bytes]:
        return tuple(self._leaves)

    def root(self) -> bytes:
        return self._acc.root()

    def append(self, kind: str, fields: Mapping[str, Any]) -> int:
        """Write one record and fsync it; return its index only once it is on disk."""
        with self._lock:
            if self._broken is not None:
                raise AuditError(f"the audit log refuses appends after a failed write ({self._broken}); reopen it")
            if self._seg_fd is None:
                raise AuditError("the audit log is closed")
            index = self.size
            stamp = records.now()
            data = records.build(index, kind, fields, time=stamp)
            leaf = merkle.leaf_hash(data)
            if index - self._seg_first >= self.segment_records:
                self._open_segment(index)
            try:
                _write_all(self._seg_fd, HEADER.pack(len(data)) + data + leaf)
                os.fsync(self._seg_fd)
            except OSError as exc:
                # The file may now end in a partial frame; only a reopen may cut it (and record the cut).
                self._broken = exc.strerror or str(exc)
                raise AuditError(f"cannot write the audit log: {self._broken}") from None
            self._leaves.append(leaf)
            self._acc.append(leaf)
            self.last_appended = (index, records.seconds(stamp))
            return index

    def append_session(
        self, kind: str, session: str, fields: Mapping[str, Any], *, payload: bytes | None = None
    ) -> int:
        """Append a session record, numbering it (`n`) and tracking whether the session has ended."""
        with self._lock:
            if kind == records.KIND_BEGIN:
                if session in self._sessions:
                    raise AuditError(f"session {session} already exists in this log")
                n = 0
            else:
                entry = self._sessions.get(session)
                if entry is None:
                    raise AuditError(f"session {session} was never begun in this log")
                n = entry.next_n
            index = self.append(kind, {"session": session, "n": n, **fields})
            self._track(kind, session, payload)
            return index

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint(self) -> str:
        """Sign and store a checkpoint of the current size (or return the latest if nothing changed)."""
        with self._lock:
            if self._latest is not None and self._latest[0] == self.size:
                return self._latest[2]
            if str(self._chain.key_for(self.size)) != str(self.key.verifier):
                # Only after a rotation cut short before the old key's checkpoint over it, with the
                # new key holding the log: that size is the old key's to sign, so it stays unsigned
                # and the next record's checkpoint is the new key's first.
                if self._latest is None:
                    raise AuditError(f"a checkpoint of {self.size} records is not {self.key.verifier}'s to sign")
                return self._latest[2]
            body = CheckpointBody(self.key.name, self.size, self.root())
            note = sign_checkpoint(body, self.key)
            self._store_note(note)
            self._latest = (self.size, body.root, note)
            return note

    def _store_note(self, note: str) -> None:
        line = json.dumps({"note": note}, ensure_ascii=True).encode() + b"\n"
        path = self.directory / CHECKPOINTS_FILE
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_folder(self.directory)

    @property
    def latest_checkpoint(self) -> str | None:
        return None if self._latest is None else self._latest[2]

    @property
    def cosigned(self) -> tuple[int, bytes] | None:
        """(size, root) of the largest checkpoint of this log a witness has cosigned, if any."""
        return self._cosigned

    def store_cosigned(self, note: str, *, key: WitnessKey | None = None) -> None:
        """Keep a checkpoint note that the witness cosigned (the log's note plus the witness's line).

        It goes into checkpoints.jsonl beside the plain checkpoints: `audit verify --witness-key`
        checks every cosignature there, and the next witness request proves consistency from it.
        Only a cosignature that verifies under the log's `witness_key` (or `key`, one of the policy's)
        is kept (AuditError otherwise).
        """
        with self._lock:
            cp = self._open(note)
            if cp.size > self.size or merkle.root(self._leaves[: cp.size]) != cp.root:
                raise AuditError(f"the cosigned checkpoint of size {cp.size} is not one of this log's")
            valid = self._cosigned_by_witness(note) if key is None else _cosigned_by(note, key)
            if not valid:
                raise AuditError(f"the checkpoint of size {cp.size} carries no valid cosignature by the witness key")
            self._store_note(note)
            if key is None and (self._cosigned is None or cp.size > self._cosigned[0]):
                self._cosigned = (cp.size, cp.root)
            signer = self.witness_key if key is None else key
            if signer is not None:
                self._note_cosigned(signer, cp.size, cp.root)

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._seg_fd is None:
                return
            try:
                if self._broken is None:
                    self.checkpoint()
            finally:
                self._release()

    def _release(self) -> None:
        if self._seg_fd is not None:
            os.close(self._seg_fd)
            self._seg_fd = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _cosigned_by(note: str, key: WitnessKey) -> bool:
    try:
        return bool(cosignatures(note, key))
    except NoteError:
        return False


def verifier_of(directory: Path) -> VerifierKey:
    """The verifier key a log declares in its header (trust on first use; prefer the auditor's own copy)."""
    scan = scan_log(directory)
    if not scan.records:
        raise AuditError(f"the audit log {directory} has no records")
    try:
        header = records.parse(scan.records[0].data)
    except records.RecordError as exc:
        raise AuditError(f"the audit log's header record is unreadable: {exc}") from None
    if header.kind != records.KIND_HEADER:
        raise AuditError("the audit log's record 0 is not its header")
    return VerifierKey.parse(header.fields["key"])
