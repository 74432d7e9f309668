"""The append-only log: durability, segments, torn-tail recovery, refusal of real damage, locking."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.errors import AuditError, KeyFileError, LogCorruptError
from specsteer.audit.log import CHECKPOINTS_FILE, SEGMENTS_DIR, TORN_DIR, AuditLog, scan_log
from specsteer.audit.note import SigningKey, open_checkpoint
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import inspect, verify
from tests.audit.helpers import build_log, frame, run_session, segment_path


def test_records_survive_reopen_and_the_checkpoint_signs_their_root(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=2)
    key = built.key
    with AuditLog.open(built.directory, key) as log:
        size, root = log.size, log.root()
        cp = open_checkpoint(log.latest_checkpoint or "", key.verifier)
    assert size == len(scan_log(built.directory).records) == 2 + 2 * (1 + 1 + 2 + 2 + 1)  # header, device-cert
    assert (cp.size, cp.root) == (size, root)
    verify(built.directory, key=key.verifier)


def test_segments_rotate_and_stay_contiguous(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=3, segment_records=5)
    segments = sorted(p.name for p in (built.directory / SEGMENTS_DIR).iterdir())
    scan = scan_log(built.directory)
    assert len(segments) == -(-len(scan.records) // 5) > 3
    assert [int(n[4:16]) for n in segments] == list(range(0, len(scan.records), 5))
    verify(built.directory, key=built.key.verifier)


def test_a_torn_final_write_fails_verify_then_is_cut_and_recorded_on_open(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    path, _, _ = segment_path(built.directory, 0)
    torn = frame(records.encode({"some": "record that was being written"}))[:-10]
    with path.open("ab") as f:
        f.write(torn)
    report = inspect(built.directory, key=built.key.verifier)
    integrity = report.checks[0]
    assert not integrity.ok and "torn write" in integrity.failures[0]

    with AuditLog.open(built.directory, built.key) as log:
        assert [t.length for t in log.repairs] == [len(torn)]
    kept = list((built.directory / TORN_DIR).iterdir())
    assert [p.read_bytes() for p in kept] == [torn]  # the cut bytes are kept as evidence
    last = records.parse(scan_log(built.directory).records[-1].data)
    assert last.kind == records.KIND_REPAIR and last.fields["cut_sha256"] == hashlib.sha256(torn).hexdigest()
    report = verify(built.directory, key=built.key.verifier)
    assert any("cut a torn final write" in n for n in report.checks[0].notes)


def test_a_zero_filled_tail_counts_as_torn(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    path, _, _ = segment_path(built.directory, 0)
    with path.open("ab") as f:
        f.write(bytes(200))  # what some filesystems leave after a power loss
    assert [t.length for t in scan_log(built.directory).torn] == [200]
    AuditLog.open(built.directory, built.key).close()
    verify(built.directory, key=built.key.verifier)


def test_damage_followed_by_intact_records_is_refused_not_truncated(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=2)
    path, offset, _ = segment_path(built.directory, 5)
    buf = bytearray(path.read_bytes())
    buf[offset + 20] ^= 0x01
    path.write_bytes(bytes(buf))
    with pytest.raises(LogCorruptError, match=r"record 5 .*checksum mismatch"):
        AuditLog.open(built.directory, built.key)
    assert path.read_bytes() == bytes(buf)  # nothing was cut


def test_a_torn_checkpoint_line_is_cut_and_recorded(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    with (built.directory / CHECKPOINTS_FILE).open("a") as f:
        f.write('{"note": "device.test/log\\n12')
    AuditLog.open(built.directory, built.key).close()
    kinds = [records.parse(r.data).kind for r in scan_log(built.directory).records]
    assert kinds[-1] == records.KIND_REPAIR
    verify(built.directory, key=built.key.verifier)


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    key = SigningKey.generate("d")
    with AuditLog.open(tmp_path / "log", key), pytest.raises(AuditError, match="open in another process"):
        AuditLog.open(tmp_path / "log", key)
    AuditLog.open(tmp_path / "log", key).close()  # the lock is released on close


def test_a_log_refuses_a_different_key(tmp_path: Path) -> None:
    AuditLog.open(tmp_path / "log", SigningKey.generate("d")).close()
    with pytest.raises(KeyFileError, match="belongs to key"):
        AuditLog.open(tmp_path / "log", SigningKey.generate("d"))


def test_an_unrelated_folder_is_not_taken_over(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(AuditError, match="not an audit log"):
        AuditLog.open(tmp_path, SigningKey.generate("d"))


def test_sessions_a_dead_process_left_open_are_closed_as_interrupted(tmp_path: Path) -> None:
    key = SigningKey.generate("d")
    log = AuditLog.open(tmp_path / "log", key)
    rec = EgressRecorder(log)
    done = run_session(rec)
    orphan = run_session(rec, close=False)
    log.close()  # the process "dies" without closing `orphan`
    with pytest.raises(AuditError):
        verify(tmp_path / "log", key=key.verifier)
    with AuditLog.open(tmp_path / "log", key) as log:
        assert log.interrupted == [orphan]
    report = verify(tmp_path / "log", key=key.verifier)
    ended = {s.session_id: s.ended for s in report.sessions}
    assert ended == {done: "close", orphan: "fallback (interrupted)"}


def test_records_outside_the_schema_are_never_written(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path / "log", SigningKey.generate("d")) as log:
        size = log.size
        with pytest.raises(records.RecordError, match="unexpected field"):
            log.append(
                records.KIND_REPAIR, {"file": "x", "offset": 0, "cut_bytes": 1, "cut_sha256": "0" * 64, "note": "hi"}
            )
        assert log.size == size


def test_after_a_failed_write_the_log_refuses_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = SigningKey.generate("d")
    log = AuditLog.open(tmp_path / "log", key)
    rec = EgressRecorder(log)

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("specsteer.audit.log._write_all", full)
    with pytest.raises(AuditError, match="No space left"):
        rec.begin_session(vocab_size=10)
    monkeypatch.undo()
    with pytest.raises(AuditError, match="refuses appends"):
        rec.begin_session(vocab_size=10)
    log._release()
    AuditLog.open(tmp_path / "log", key).close()
    verify(tmp_path / "log", key=key.verifier)


def test_a_crash_while_creating_the_log_is_finished_on_open(tmp_path: Path) -> None:
    key = SigningKey.generate("d")
    (tmp_path / "log" / SEGMENTS_DIR).mkdir(parents=True)
    (tmp_path / "log" / SEGMENTS_DIR / "seg-000000000000.log").write_bytes(b"\x00\x00")
    AuditLog.open(tmp_path / "log", key).close()
    report = verify(tmp_path / "log", key=key.verifier)
    assert report.records == 2  # the header, then the repair of the torn first write


def test_a_cut_whose_repair_record_was_lost_is_recorded_on_the_next_open(tmp_path: Path) -> None:
    """A crash after cutting a torn tail but before logging the cut must not leave the cut silent."""
    built = build_log(tmp_path, sessions=1)
    path, _, _ = segment_path(built.directory, 0)
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(b"\x00\x00\x01")
    log = AuditLog(built.directory, built.key, segment_records=4096)
    log._cut(scan_log(built.directory).torn[0])  # the cut happens, then the process dies
    assert path.stat().st_size == size
    report = inspect(built.directory, key=built.key.verifier)
    assert any("no repair record says so" in m for m in report.checks[0].failures)
    AuditLog.open(built.directory, built.key).close()
    report = verify(built.directory, key=built.key.verifier)
    assert sum("cut a torn final write" in n for n in report.checks[0].notes) == 1


def test_only_ascii_digits_in_times_segment_names_and_evidence_names(tmp_path: Path) -> None:
    """`\\d` takes any script's digits: a time in Arabic-Indic digits would carry ~9 bits a position."""
    built = build_log(tmp_path, sessions=1)
    data = scan_log(built.directory).records[1].data
    fields = records.parse(data).fields
    digits = fields["time"].translate({ord(c): 0x660 + int(c) for c in "0123456789"})  # ٠١٢…
    with pytest.raises(records.RecordError):
        records.parse(data.replace(fields["time"].encode(), records.encode({"t": digits})[6:-2]))
    os.rename(
        built.directory / SEGMENTS_DIR / "seg-000000000000.log", built.directory / SEGMENTS_DIR / "seg-٠٠٠٠٠٠٠٠٠٠٠٠.log"
    )
    assert any("is not a segment of this log" in p for p in scan_log(built.directory).problems)
