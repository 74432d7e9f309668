"""Audit logs as a device writes them, and as an auditor must judge them: `audit verify`'s verdict.

Nine logs are written through the real device API (`audit.log.AuditLog` and the recorder every
uplink passes, `audit.recorder.EgressRecorder`) with a fixed test-only key, one of them witnessed:
its Closes answered by the real witness (`server.witness.Witness`) with the test-only witness key.
The others are copies tampered with as an attacker or a broken disk would (a byte flipped, a record
dropped, a log cut short, checkpoints re-signed with another key, a record appended after the last
checkpoint, a rewrite under a cosigned checkpoint, a forged cosignature line) or written around the
recorder's checks (an uplink it would have blocked, a resume carrying a token never sent). Each
case's expected outcome is `audit.verify.inspect`'s: the verdict and which of its named checks pass.

The log API stamps records with the wall clock and picks random session IDs, and the witness
cosigns at its clock's time; here all three are fixed (a clock that ticks one second a record from
2026-01-01, session IDs hashed from a counter, a witness clock a minute a cosignature from
2026-01-01) so a second `write` gives the same bytes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from specsteer.audit import merkle, recorder, records
from specsteer.audit.cosignature import load_witness_key
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import CHECKPOINTS_FILE, HEADER, LOCK_FILE, SEGMENTS_DIR, AuditLog, scan_log, segment_name
from specsteer.audit.note import SIG_PREFIX, Checkpoint, load_verifier_key, parse_note, sign_checkpoint
from specsteer.audit.rotation import handover_message
from specsteer.audit.verify import inspect
from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict
from specsteer.core.wire import WitnessRequest
from specsteer.server.witness import Cosigned, Witness
from tools.conformance.common import ConformanceError, mismatch
from tools.conformance.keys import OTHER_KEY, TEST_KEY, TEST_WITNESS, write_keys
from tools.conformance.witness import T0 as WITNESS_T0

FILE = "audit/cases.json"
DEVICE = DeviceIdentity("conformance-test-device", hashlib.sha256(b"conformance test certificate").hexdigest())
VOCAB = 32
SEGMENT_RECORDS = 8  # small, so the logs span several segments
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    """Fix the log's clock and the recorder's session IDs while a log is written."""
    ticks = iter(range(1_000_000))
    sessions = iter(range(1_000_000))

    def now() -> str:
        return (EPOCH + timedelta(seconds=next(ticks))).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def session_id(nbytes: int) -> str:
        return hashlib.sha256(f"conformance session {next(sessions)}".encode()).hexdigest()[: 2 * nbytes]

    with mock.patch.object(records, "now", now), mock.patch.object(recorder.secrets, "token_hex", session_id):
        yield


def _open(directory: Path, *, witnessed: bool = False) -> AuditLog:
    witness_key = TEST_WITNESS.key if witnessed else None  # the device checks the witness's answers with it
    return AuditLog.open(directory, TEST_KEY, segment_records=SEGMENT_RECORDS, device=DEVICE, witness_key=witness_key)


def _finish(log: AuditLog) -> None:
    log.close()
    (log.directory / LOCK_FILE).unlink()  # the writer's lock file: not part of the log


def _candidates(*ids: int) -> SteeringVector:
    return SteeringVector(tuple((i,) for i in ids), tuple(-0.5 * n for n in range(len(ids))))


# What a witnessed session does with the witness's answer to its Close: the downlink it logs.
_Answer = Callable[[int, WitnessRequest], bytes]


def _write_good(directory: Path) -> None:
    """Two sessions through the recorder: one steered to its Close, one padded, with a guard placeholder,
    ending in a fallback."""
    log = _open(directory)
    rec = recorder.EgressRecorder(log)
    sid = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    rec.on_uplink(sid, wire.encode_open((1, 2, 3), SessionParams(top_k=4, draft_len=4)))
    rec.on_uplink(sid, wire.encode_round(1, (), (5, 6, 7)))
    rec.on_downlink(sid, wire.encode_downlink(1, Verdict(1, _candidates(3, 7, 11))))
    rec.on_uplink(sid, wire.encode_round(2, (7,), (8, 9)))
    rec.on_downlink(sid, wire.encode_downlink(2, Verdict(2, _candidates(4))))
    rec.on_uplink(sid, wire.encode_close(3))
    sid = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    rec.on_uplink(sid, wire.encode_open((4, 5), SessionParams(top_k=4, draft_len=4, padded_frames=True)))
    rec.on_guard_decision(sid, decision="placeholder", count=1, placeholder="<EMAIL>")
    rec.on_uplink(sid, wire.encode_round(1, (), (5, 6), (20, 21), pad_to=4))
    rec.on_downlink(sid, wire.encode_downlink(1, Verdict(0, _candidates(3, 9))))
    rec.on_fallback(sid, "verifier-unreachable")
    _finish(log)


def _write_downlink_violation(directory: Path) -> None:
    """The device received a downlink with a candidate outside its vocabulary: the recorder logs it
    as received, refuses it, and the device finishes locally."""
    log = _open(directory)
    rec = recorder.EgressRecorder(log)
    sid = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    rec.on_uplink(sid, wire.encode_open((1, 2), SessionParams(top_k=4, draft_len=4)))
    rec.on_uplink(sid, wire.encode_round(1, (), (5, 6)))
    with contextlib.suppress(ProtocolError):
        rec.on_downlink(sid, wire.encode_downlink(1, Verdict(0, _candidates(3, VOCAB + 8))))
    rec.on_fallback(sid, "protocol-error")
    _finish(log)


def _write_uplink_bypass(directory: Path) -> None:
    """An uplink the recorder would have blocked (a commit that is no candidate), appended around it:
    what a device that sent egress past its recorder and then logged it would leave."""
    log = _open(directory)
    rec = recorder.EgressRecorder(log)
    sid = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    rec.on_uplink(sid, wire.encode_open((1, 2), SessionParams(top_k=4, draft_len=4)))
    rec.on_uplink(sid, wire.encode_round(1, (), (5, 6)))
    rec.on_downlink(sid, wire.encode_downlink(1, Verdict(0, _candidates(3, 7))))
    for payload in (wire.encode_round(2, (30,), (6,)), wire.encode_close(3)):
        log.append_session(records.KIND_UPLINK, sid, records.payload_fields("up", payload), payload=payload)
    _finish(log)


def _witnessed_sessions(
    directory: Path, drafts: tuple[tuple[int, ...], ...], answer: _Answer, *, keep_unchecked: bool = False
) -> None:
    """One session per draft, each Close carrying the log's checkpoint and `answer`'s downlink logged
    after it. Its own clock and session IDs from the start, so a rewrite replays them identically.
    `keep_unchecked`: keep every answer as cosigned without checking it (the key holder's own tool
    rewriting the log, which the honest recorder would not do)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_deterministic())
        if keep_unchecked:
            stack.enter_context(mock.patch.object(recorder.EgressRecorder, "_cosignature_problem", lambda *_: None))
            stack.enter_context(mock.patch.object(AuditLog, "_cosigned_by_witness", lambda *_: True))
        log = _open(directory, witnessed=True)
        rec = recorder.EgressRecorder(log)
        for n, draft in enumerate(drafts):
            sid = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
            rec.on_uplink(sid, wire.encode_open((1, 2, 3), SessionParams(top_k=4, draft_len=4)))
            rec.on_uplink(sid, wire.encode_round(1, (), draft))
            rec.on_downlink(sid, wire.encode_downlink(1, Verdict(1, _candidates(3, 7))))
            rec.on_uplink(sid, wire.encode_round(2, (7,), (8,)))
            rec.on_downlink(sid, wire.encode_downlink(2, Verdict(1, None)))
            request = rec.witness_request(sid)
            rec.on_uplink(sid, wire.encode_close(3, request))
            rec.on_downlink(sid, answer(n, request))
        _finish(log)


def _own_clock(writer: Callable[[Path], None]) -> Callable[[Path], None]:
    """A writer with its own clock and session IDs, so adding it leaves every other log's bytes as they were."""

    def write(directory: Path) -> None:
        with _deterministic():
            writer(directory)

    return write


def _one_session(log: AuditLog, draft: tuple[int, ...]) -> None:
    rec = recorder.EgressRecorder(log)
    sid = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    rec.on_uplink(sid, wire.encode_open((1, 2), SessionParams(top_k=4, draft_len=4)))
    rec.on_uplink(sid, wire.encode_round(1, (), draft))
    rec.on_downlink(sid, wire.encode_downlink(1, Verdict(1, _candidates(3, 7))))
    rec.on_uplink(sid, wire.encode_close(2))


@_own_clock
def _write_rotated(directory: Path) -> None:
    """A session, the log handed from the device's key to `keys/other-device` (same name) by a
    key-rotation record the device's key signed (§5.1), then a session under the new key."""
    log = _open(directory)
    _one_session(log, (5, 6))
    log.rotate_key(OTHER_KEY)
    _one_session(log, (8, 9))
    _finish(log)


@_own_clock
def _write_rotation_cut_short(directory: Path) -> None:
    """A rotation cut short by a crash after its record, before the old key's checkpoint over it;
    the device then opens the log with the new key and writes a session (size P+1 stays unsigned)."""
    log = _open(directory)
    _one_session(log, (5, 6))
    log.rotate_key(OTHER_KEY)
    log._release()  # the crash: nothing more is written, not even the lock's release
    (directory / LOCK_FILE).unlink()
    path = directory / CHECKPOINTS_FILE
    path.write_text("".join(path.read_text(encoding="ascii").splitlines(keepends=True)[:-1]), encoding="ascii")
    log = AuditLog.open(directory, OTHER_KEY, segment_records=SEGMENT_RECORDS, device=DEVICE)
    _one_session(log, (8, 9))
    _finish(log)


@_own_clock
def _write_rotation_forged(directory: Path) -> None:
    """A handover to `keys/other-device` signed by that key itself, not by the key in force, and a
    session signed by it after: nothing is handed over, so its checkpoints verify under no key in force."""
    log = _open(directory)
    _one_session(log, (5, 6))
    position = log.size
    message = handover_message(TEST_KEY.verifier, OTHER_KEY.verifier, position)
    forged = base64.b64encode(OTHER_KEY.sign(message)).decode()
    log.append(records.KIND_ROTATION, {"key": str(OTHER_KEY.verifier), "signature": forged})
    log.checkpoint()
    log._chain.rotations.append((position, OTHER_KEY.verifier))  # the forger's writer believes its own handover
    log.key = OTHER_KEY
    _one_session(log, (8, 9))
    _finish(log)


def _lost_then_resumed(log: AuditLog, resume_ids: tuple[int, ...] | None) -> None:
    """A session lost with its second round unanswered, and the generation resumed in a new session
    whose Open carries `resume_ids` (None: what the lost session sent up and had committed, through
    the recorder; else these tokens, appended around it)."""
    rec = recorder.EgressRecorder(log)
    params = SessionParams(top_k=4, draft_len=4)
    lost = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    rec.on_uplink(lost, wire.encode_open((1, 2), params))
    rec.on_uplink(lost, wire.encode_round(1, (), (5, 6, 7)))
    rec.on_downlink(lost, wire.encode_downlink(1, Verdict(1, _candidates(3, 7))))
    rec.on_uplink(lost, wire.encode_round(2, (7,), (8, 9)))
    rec.on_fallback(lost, "verifier-lost")
    resumed = rec.begin_session(vocab_size=VOCAB, max_top_k=4)
    sent = (5, 7)  # the accepted 5, then the unanswered round's commit 7
    frames = [
        ("up", wire.encode_open((1, 2), params, sent if resume_ids is None else resume_ids)),
        ("up", wire.encode_round(1, (), (8, 9))),
        ("down", wire.encode_downlink(1, Verdict(2, None))),
        ("up", wire.encode_close(2)),
    ]
    for direction, payload in frames:
        if resume_ids is None:
            (rec.on_uplink if direction == "up" else rec.on_downlink)(resumed, payload)
        else:
            kind = records.KIND_UPLINK if direction == "up" else records.KIND_DOWNLINK
            log.append_session(kind, resumed, records.payload_fields(direction, payload), payload=payload)


@_own_clock
def _write_resumed(directory: Path) -> None:
    """A generation whose verifier was lost mid-round, resumed in a new session carrying exactly what
    the lost one had sent up and had committed."""
    log = _open(directory)
    _lost_then_resumed(log, None)
    _finish(log)


@_own_clock
def _write_resume_unsent(directory: Path) -> None:
    """The same, but the resumed Open also carries 8, a token the lost session drafted and the verifier
    never accepted: written around the recorder, which refuses it."""
    log = _open(directory)
    _lost_then_resumed(log, (5, 7, 8))
    _finish(log)


_WITNESSED_DRAFTS = ((5, 6, 7), (9, 10, 11))


def _write_witnessed(directory: Path) -> None:
    """Two sessions whose Closes the test witness (`keys/test-witness.key`, a fixed clock) cosigned,
    each answer kept as the session's last downlink and in checkpoints.jsonl."""
    times = iter(range(WITNESS_T0, WITNESS_T0 + 10**6, 60))
    with tempfile.TemporaryDirectory() as state:
        witness = Witness(TEST_WITNESS, Path(state) / "witness-state.json", clock=lambda: next(times))

        def cosign(_: int, request: WitnessRequest) -> bytes:
            result = witness.cosign(DEVICE.name, request)
            if not isinstance(result, Cosigned):
                raise ConformanceError(f"the test witness refused the conformance log's checkpoint: {result}")
            return wire.encode_cosignature(3, result.witness, result.signature)

        _witnessed_sessions(directory, _WITNESSED_DRAFTS, cosign)


def _rewrite_under_cosigned(directory: Path) -> None:
    """The log key's holder rewrites a token of session 1, under both cosigned checkpoints: the same
    sessions replayed with the one change, every checkpoint and Close signed afresh, the witness's
    answers copied from the original (it cannot get new ones)."""
    answers = []
    for stored in scan_log(directory).records:
        rec = records.parse(stored.data)
        if rec.kind == records.KIND_DOWNLINK and rec.payload and wire.decode_cosignature(rec.payload):
            answers.append(rec.payload)
    shutil.rmtree(directory)
    drafts = ((5, 6, 8), *_WITNESSED_DRAFTS[1:])
    _witnessed_sessions(directory, drafts, lambda n, _: answers[n], keep_unchecked=True)


def _bogus_cosignature(directory: Path) -> None:
    """The last cosigned checkpoint's witness line with one bit of its Ed25519 signature flipped."""
    path = directory / CHECKPOINTS_FILE
    notes = [json.loads(line)["note"] for line in path.read_text(encoding="ascii").splitlines()]
    i = max(i for i, note in enumerate(notes) if note.count(SIG_PREFIX) == 2)
    head, _, b64 = notes[i].rstrip("\n").rpartition(" ")
    signature = bytearray(base64.b64decode(b64))
    signature[-1] ^= 0x01
    notes[i] = f"{head} {base64.b64encode(bytes(signature)).decode()}\n"
    path.write_text("".join(json.dumps({"note": n}, ensure_ascii=True) + "\n" for n in notes), encoding="ascii")


# -- tampering with a copy of the good log -----------------------------------------------------------------


def _segment(directory: Path, position: int) -> tuple[Path, int, int]:
    """(segment file, byte offset, frame length) of record `position`."""
    stored = scan_log(directory).records[position]
    return directory / SEGMENTS_DIR / stored.segment, stored.offset, HEADER.size + len(stored.data) + 32


def _flip_byte(directory: Path) -> None:
    path, offset, _ = _segment(directory, 4)
    data = bytearray(path.read_bytes())
    data[offset + HEADER.size + 10] ^= 0x01  # inside record 4's JSON: its trailer no longer matches
    path.write_bytes(bytes(data))


def _drop_record(directory: Path) -> None:
    path, offset, length = _segment(directory, 3)
    data = path.read_bytes()
    path.write_bytes(data[:offset] + data[offset + length :])


def _truncate(directory: Path) -> None:
    stored = scan_log(directory).records[-1]
    path = directory / SEGMENTS_DIR / stored.segment
    path.write_bytes(path.read_bytes()[: stored.offset + HEADER.size + 5])  # the last frame cut short


def _remove_last_segment(directory: Path) -> None:
    last = sorted((directory / SEGMENTS_DIR).iterdir())[-1]
    last.unlink()


def _resign_checkpoints(directory: Path) -> None:
    """Every checkpoint re-signed by another key under the log key's name (a forger's key)."""
    path = directory / CHECKPOINTS_FILE
    lines = []
    for line in path.read_text(encoding="ascii").splitlines():
        body = Checkpoint.parse_body(parse_note(json.loads(line)["note"]).text)
        lines.append(json.dumps({"note": sign_checkpoint(body, OTHER_KEY)}, ensure_ascii=True))
    path.write_text("".join(f"{line}\n" for line in lines), encoding="ascii")


def _append_unsigned(directory: Path) -> None:
    """A record framed exactly as the device frames one, after the last signed checkpoint."""
    scan = scan_log(directory)
    data = records.build(len(scan.records), records.KIND_BEGIN, {
        "session": "f" * 32, "n": 0, "vocab_size": VOCAB, "max_top_k": 4,
    })  # fmt: skip
    last = directory / SEGMENTS_DIR / segment_name(len(scan.records) - len(scan.records) % SEGMENT_RECORDS)
    with last.open("ab") as f:
        f.write(HEADER.pack(len(data)) + data + merkle.leaf_hash(data))


_WITNESS_PUB = "keys/test-witness.pub"

# (name, description, base log, tampering or None, verifier key file or None, witness key files)
_CASES: list[tuple[str, str, str, Callable[[Path], None] | None, str | None, tuple[str, ...]]] = [
    ("good", "two sessions written through the recorder, checked with the device's key", "good", None,
     "keys/test-device.pub", ()),
    ("good-no-key", "the same log without the auditor's key: every check passes, authenticity unproven", "good",
     None, None, ()),
    ("good-wrong-key", "the same log checked with a key that is not the device's", "good", None,
     "keys/other-device.pub", ()),
    ("byte-flipped", "one bit of record 4 flipped", "good", _flip_byte, "keys/test-device.pub", ()),
    ("record-dropped", "record 3's frame removed from its segment", "good", _drop_record, "keys/test-device.pub", ()),
    ("truncated", "the last segment cut inside its last frame, which a checkpoint signs", "good", _truncate,
     "keys/test-device.pub", ()),
    ("segment-removed", "the last segment file deleted", "good", _remove_last_segment, "keys/test-device.pub", ()),
    ("checkpoints-resigned", "every checkpoint re-signed with another key under the log key's name", "good",
     _resign_checkpoints, "keys/test-device.pub", ()),
    ("unsigned-tail", "a well-formed record appended after the last signed checkpoint", "good", _append_unsigned,
     "keys/test-device.pub", ()),
    ("downlink-violation", "a signed log holding a downlink with a candidate outside the vocabulary",
     "downlink-violation", None, "keys/test-device.pub", ()),
    ("uplink-bypass", "a signed log holding an uplink the recorder would have blocked (commit not a candidate)",
     "uplink-bypass", None, "keys/test-device.pub", ()),
    ("witnessed", "two sessions whose Closes the test witness cosigned, checked with its key", "witnessed", None,
     "keys/test-device.pub", (_WITNESS_PUB,)),
    ("witnessed-other-witness", "the same log checked with a witness key that never cosigned it", "witnessed",
     None, "keys/test-device.pub", ("keys/other-witness.pub",)),
    ("witness-rewritten", "a token under the cosigned checkpoints rewritten by the log key's holder, every "
     "checkpoint and Close re-signed, the witness's answers copied: its cosignatures no longer verify",
     "witnessed", _rewrite_under_cosigned, "keys/test-device.pub", (_WITNESS_PUB,)),
    ("witness-rewritten-no-witness-key", "the same rewrite checked with the device's key alone: it holds together "
     "(only the witness's key tells)", "witness-rewritten", None, "keys/test-device.pub", ()),
    ("witness-bogus-cosignature", "the last cosigned checkpoint's witness line with one signature bit flipped",
     "witnessed", _bogus_cosignature, "keys/test-device.pub", (_WITNESS_PUB,)),
    ("rotated", "the log key handed over to another key of the same name by a rotation the device's key signed, "
     "checked with the device's (first) key", "rotated", None, "keys/test-device.pub", ()),
    ("rotation-cut-short", "a rotation cut short before the old key's checkpoint over it, the log written on by "
     "the new key from the next size", "rotation-cut-short", None, "keys/test-device.pub", ()),
    ("rotation-forged", "a handover signed by the new key itself, not by the key in force, and a session under it",
     "rotation-forged", None, "keys/test-device.pub", ()),
    ("resumed", "a session lost mid-round and the generation resumed in a new one whose Open carries what the "
     "lost session sent up and had committed", "resumed", None, "keys/test-device.pub", ()),
    ("resume-unsent", "a resumed Open that also carries a drafted token the verifier never accepted (never "
     "committed): more than had gone up", "resume-unsent", None, "keys/test-device.pub", ()),
]  # fmt: skip

_WRITERS: dict[str, Callable[[Path], None]] = {
    "good": _write_good,
    "downlink-violation": _write_downlink_violation,
    "uplink-bypass": _write_uplink_bypass,
    "witnessed": _write_witnessed,
    "rotated": _write_rotated,
    "rotation-cut-short": _write_rotation_cut_short,
    "rotation-forged": _write_rotation_forged,
    "resumed": _write_resumed,
    "resume-unsent": _write_resume_unsent,
}


def outcome(folder: Path, case: dict[str, Any]) -> dict[str, Any]:
    """`audit verify`'s judgement of one case, as the vector states it."""
    key = None if case["key"] is None else load_verifier_key(folder / case["key"])
    witness_keys = [load_witness_key(folder / path) for path in case.get("witness_keys", ())]
    report = inspect(folder / case["log"], key=key, witness_keys=witness_keys)
    return {
        "verdict": report.verdict,
        "checks": [{"name": c.name, "ok": c.ok} for c in report.checks],
        "records": report.records,
        "sessions": len(report.sessions),
    }


def build(folder: Path) -> dict[str, Any]:
    """Write the keys and logs under `folder` and return the cases file's content."""
    write_keys(folder)
    written: dict[str, Path] = {}
    with _deterministic():
        for name, writer in _WRITERS.items():
            written[name] = folder / "audit" / "logs" / name
            writer(written[name])
        cases = []
        for name, description, base, tamper, key_file, witness_keys in _CASES:
            log = written[base]
            if tamper is not None:
                log = folder / "audit" / "logs" / name
                shutil.copytree(written[base], log)
                tamper(log)
                written[name] = log  # a later case may judge it with other keys
            case: dict[str, Any] = {
                "name": name, "description": description, "log": log.relative_to(folder).as_posix(), "key": key_file,
            }  # fmt: skip
            if witness_keys:  # absent where there are none, as before witnessing existed
                case["witness_keys"] = list(witness_keys)
            case["expected"] = outcome(folder, case)
            cases.append(case)
    return {"kind": "audit-logs", "function": "specsteer.audit.verify.inspect", "cases": cases}


def check(folder: Path, doc: dict[str, Any]) -> list[str]:
    problems = []
    for case in doc["cases"]:
        if not (folder / case["log"]).is_dir():
            raise ConformanceError(f"{FILE}: case {case['name']!r} names {case['log']}, which is missing")
        got = outcome(folder, case)
        if got != case["expected"]:
            problems.append(mismatch(FILE, case["name"], "audit verify", case["expected"], got))
    return problems
