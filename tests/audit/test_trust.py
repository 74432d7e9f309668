"""What an auditor is told must be true: no unsigned tail passes, no key means no VERIFIED, a
hostile tail cannot stall the reader, and repair evidence is checked."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from specsteer.audit import log as log_mod
from specsteer.audit import records
from specsteer.audit.cli import main
from specsteer.audit.errors import LogCorruptError, VerificationFailed
from specsteer.audit.log import SEGMENTS_DIR, TORN_DIR, AuditLog, scan_log
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import verify
from tests.audit.helpers import BuiltLog, build_log, checkpoint_notes, frame, run_session, segment_path

# Spelled out (not imported) so this file also runs against the code before the fix.
EXIT_OK, EXIT_FAILED, EXIT_UNPROVEN = 0, 1, 3
VERIFIED, UNPROVEN, FAILED = "VERIFIED", "UNPROVEN", "FAILED"


def _last_segment(directory: Path) -> Path:
    return max((directory / SEGMENTS_DIR).iterdir())


def _failure_text(directory: Path, **kwargs: object) -> str:
    with pytest.raises(VerificationFailed) as info:
        verify(directory, **kwargs)  # type: ignore[arg-type]
    return "\n".join(m for c in info.value.report.checks for m in c.failures)


# -- records after the last signed checkpoint are not VERIFIED ----------------------------------


def _forged_session_frames(start: int) -> bytes:
    """A whole session (begin, fallback) appended with correct indices but never signed."""
    sid = "f" * 32
    begin = records.build(start, records.KIND_BEGIN, {"session": sid, "n": 0, "vocab_size": 500, "max_top_k": 3})
    end = records.build(start + 1, records.KIND_FALLBACK, {"session": sid, "n": 1, "reason": "verifier-unreachable"})
    return frame(begin) + frame(end)


def test_an_unsigned_tail_fails_even_with_key_and_checkpoint(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=2)
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint_notes(built.directory)[-1])
    n = len(scan_log(built.directory).records)
    with _last_segment(built.directory).open("ab") as f:
        f.write(_forged_session_frames(n))
    argv = ["verify", str(built.directory), "--key", str(built.pub), "--checkpoint", str(kept), "--json"]
    assert main(argv) == EXIT_FAILED
    report = verify_json(argv)
    assert report["verdict"] == FAILED
    (cp,) = [c for c in report["checks"] if c["name"] == "checkpoints"]
    assert not cp["ok"] and f"records {n} to {n + 1} are not covered by any signed checkpoint" in cp["failures"][0]


def test_one_unsigned_record_after_the_last_checkpoint_fails(tmp_path: Path) -> None:
    """A single forged record (here a device binding) is as unsigned as a whole forged session."""
    built = build_log(tmp_path, sessions=1)
    n = len(scan_log(built.directory).records)
    forged = records.build(n, records.KIND_DEVICE, {"device": "mallory", "cert_sha256": "b2" * 32})
    with _last_segment(built.directory).open("ab") as f:
        f.write(frame(forged))
    with pytest.raises(VerificationFailed) as info:
        verify(built.directory, key=built.key.verifier)
    report = info.value.report
    assert report.verdict == FAILED
    assert [c.name for c in report.checks if not c.ok] == ["checkpoints"]
    (cp,) = [c for c in report.checks if c.name == "checkpoints"]
    assert f"records {n} to {n} are not covered by any signed checkpoint" in cp.failures[0]


def verify_json(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    return json.loads(out.getvalue())


def test_an_honest_log_is_signed_at_every_session_end(tmp_path: Path) -> None:
    """The design that makes an unsigned tail a plain failure: every session end signs, so honest logs have none."""
    built = build_log(tmp_path, sessions=0)
    with AuditLog.open(built.directory, built.key) as log:
        rec = EgressRecorder(log)
        for seed in range(3):
            run_session(rec, seed=seed)
            assert log.latest_checkpoint is not None
            assert int(log.latest_checkpoint.split("\n")[1]) == log.size
        sid = rec.begin_session(vocab_size=500)
        rec.on_fallback(sid, "verifier-unreachable")
        assert int(log.latest_checkpoint.split("\n")[1]) == log.size
    verify(built.directory, key=built.key.verifier)


# -- no key, no VERIFIED -------------------------------------------------------------------------


def test_without_a_key_a_resigned_log_is_unproven_not_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "forged").mkdir()
    real = build_log(tmp_path / "real", sessions=1)
    forged = build_log(tmp_path / "forged", sessions=2, name=real.key.name)  # an attacker's own key, same name
    assert main(["verify", str(forged.directory)]) == EXIT_UNPROVEN
    out = capsys.readouterr()
    assert f": {UNPROVEN} (every check passed, but authenticity is unproven" in out.out
    assert VERIFIED not in out.out.splitlines()[0].split(": ")[-1]
    assert "authenticity is unproven" in out.err
    assert main(["verify", str(forged.directory), "--json"]) == EXIT_UNPROVEN
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == UNPROVEN and report["ok"] is False and report["authenticated"] is False
    assert main(["export", str(forged.directory), "--out", str(tmp_path / "bundle")]) == EXIT_UNPROVEN
    assert json.loads((tmp_path / "bundle" / "report.json").read_text())["verdict"] == UNPROVEN
    capsys.readouterr()
    # With the key the auditor holds, the same log fails; the real one verifies.
    assert main(["verify", str(forged.directory), "--key", str(real.pub)]) == EXIT_FAILED
    assert main(["verify", str(real.directory), "--key", str(real.pub), "--json"]) == EXIT_OK


# -- a hostile log cannot stall the verifier -------------------------------------------------------


class _HashBudget:
    """Counts the bytes the log reader hashes; past the budget it stops the run (a stall, caught)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.hashed = 0
        self._real = log_mod.merkle.leaf_hash

    def __call__(self, data: bytes) -> bytes:
        self.hashed += len(data)
        if self.hashed > self.budget:
            raise AssertionError(f"the reader hashed more than {self.budget} bytes: recovery is not linear")
        return self._real(data)


def test_a_1_mib_hostile_tail_is_read_in_linear_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = build_log(tmp_path, sessions=1)
    seg = _last_segment(built.directory)
    good = seg.stat().st_size
    bad = bytearray(frame(records.build(99, records.KIND_FALLBACK, {"session": "e" * 32, "n": 1, "reason": "x"})))
    bad[-1] ^= 1  # a complete final-looking frame whose checksum is wrong
    # Then 1 MiB in which every fifth offset looks like the start of a 32 KiB JSON frame.
    hostile = bytes(bad) + b"\x00\x00\x80\x00{" * ((1 << 20) // 5)
    with seg.open("ab") as f:
        f.write(hostile)
    size = seg.stat().st_size
    budget = _HashBudget(2 * size)
    monkeypatch.setattr(log_mod.merkle, "leaf_hash", budget)
    scan = scan_log(built.directory)
    assert budget.hashed <= size + good  # each byte hashed about once
    assert scan.torn == []  # more than one frame behind a bad one: damage, not a torn write
    assert scan.problems and f"at byte {good}): checksum mismatch" in scan.problems[0]
    monkeypatch.undo()
    with pytest.raises(LogCorruptError):
        AuditLog.open(built.directory, built.key)


def test_only_a_torn_final_frame_is_a_torn_write(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    n = len(scan_log(built.directory).records)
    seg = _last_segment(built.directory)
    good = seg.read_bytes()
    junk = bytearray(frame(records.build(n, records.KIND_FALLBACK, {"session": "e" * 32, "n": 1, "reason": "x"})))
    junk[-1] ^= 1
    with seg.open("ab") as f:  # a bad complete frame, then half a frame: two frames, not one torn write
        f.write(bytes(junk) + frame(records.encode({"kind": "half"}))[:17])
    text = _failure_text(built.directory, key=built.key.verifier)
    assert f"record {n} (" in text and "checksum mismatch" in text and "torn write" not in text
    with pytest.raises(LogCorruptError, match="checksum mismatch"):
        AuditLog.open(built.directory, built.key)
    # A single torn final frame is still a torn write, cut and recorded on open.
    seg.write_bytes(good + frame(b'{"kind":"x"}')[:17])
    with AuditLog.open(built.directory, built.key) as log:
        assert len(log.repairs) == 1
    verify(built.directory, key=built.key.verifier)


# -- repair evidence is checked --------------------------------------------------------------------


def _repaired(tmp_path: Path) -> BuiltLog:
    built = build_log(tmp_path, sessions=1)
    with _last_segment(built.directory).open("ab") as f:
        f.write(frame(b'{"kind":"half-written"}')[:19])
    with AuditLog.open(built.directory, built.key) as log:
        assert log.repairs
    return built


def test_deleted_repair_evidence_does_not_read_as_kept(tmp_path: Path) -> None:
    built = _repaired(tmp_path)
    report = verify(built.directory, key=built.key.verifier)
    (integrity,) = [c for c in report.checks if c.name == "log integrity"]
    assert any("(kept as torn/seg-000000000000.log." in n and "sha256 checked" in n for n in integrity.notes)
    shutil.rmtree(built.directory / TORN_DIR)
    text = _failure_text(built.directory, key=built.key.verifier)
    assert "the device cut a torn final write of 19 bytes" in text
    assert "is missing: the evidence of that repair was removed" in text


def test_a_damaged_signed_final_record_is_not_called_a_torn_write(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    n = len(scan_log(built.directory).records)
    path, offset, length = segment_path(built.directory, n - 1)  # the Close, covered by the close checkpoint
    buf = bytearray(path.read_bytes())
    buf[offset + length - 1] ^= 1
    path.write_bytes(bytes(buf))
    text = _failure_text(built.directory, key=built.key.verifier)
    assert f"record {n - 1} ({SEGMENTS_DIR}/{path.name} at byte {offset}) is damaged" in text
    assert "not a torn write but damage to a signed record" in text and "cuts it back" not in text
    with pytest.raises(LogCorruptError, match="is to a signed record, not a torn write"):
        AuditLog.open(built.directory, built.key)
    assert path.read_bytes() == bytes(buf)  # nothing was cut
