"""Log-key rotation (issue 48, Build 5): the key in force signs a handover to a new key, recorded in
the log; the rotated log verifies across it under the auditor's original key; a handover not signed
by the key in force fails."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cli import main
from specsteer.audit.errors import KeyFileError, LogHandedOver
from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.rotation import handover_message
from tests.audit.helpers import DEVICE, run_session


def _verify(log: Path, pub: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["verify", str(log), "--key", str(pub), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _keys(tmp: Path) -> tuple[SigningKey, SigningKey, Path]:
    old, new = SigningKey.generate("device.test/log"), SigningKey.generate("device.test/log")
    pub = tmp / "device.pub"  # the auditor holds the log's first key
    pub.write_text(f"{old.verifier}\n")
    return old, new, pub


def test_a_rotated_log_verifies_across_the_rotation(tmp_path: Path, capsys) -> None:
    old, new, pub = _keys(tmp_path)
    log = tmp_path / "log"
    with AuditLog.open(log, old, device=DEVICE) as opened:
        run_session(EgressRecorder(opened), seed=0)
        position = opened.rotate_key(new)
        run_session(EgressRecorder(opened), seed=1)
    with pytest.raises(KeyFileError, match="belongs to key"):
        AuditLog.open(log, old).close()  # the old key no longer writes to it
    with AuditLog.open(log, new) as reopened:  # the new one does
        run_session(EgressRecorder(reopened), seed=2)
    code, report = _verify(log, pub, capsys)
    assert (code, report["verdict"]) == (0, "VERIFIED"), report
    (check,) = [c for c in report["checks"] if c["name"] == "log key"]
    assert f"record {position}: the log key was handed over to {new.verifier}" in check["notes"]


def test_a_rotation_not_signed_by_the_key_in_force_fails(tmp_path: Path, capsys) -> None:
    """Whoever holds some other key writes a handover to it (signed by itself) and goes on signing:
    nothing is handed over, so its checkpoints do not verify and the log fails."""
    old, new, pub = _keys(tmp_path)
    log = tmp_path / "log"
    with AuditLog.open(log, old, device=DEVICE) as opened:
        run_session(EgressRecorder(opened), seed=0)
        position = opened.size
        forged = base64.b64encode(new.sign(handover_message(old.verifier, new.verifier, position))).decode()
        opened.append(records.KIND_ROTATION, {"key": str(new.verifier), "signature": forged})
        opened.checkpoint()
        opened._chain.rotations.append((position, new.verifier))  # the writer believes its own handover
        opened.key = new
        run_session(EgressRecorder(opened), seed=1)
    code, report = _verify(log, pub, capsys)
    assert (code, report["verdict"]) == (1, "FAILED"), report
    failed = {c["name"]: c["failures"] for c in report["checks"] if not c["ok"]}
    assert any("is not signed by the key in force" in f for f in failed["log key"]), failed
    assert "checkpoints" in failed  # the new key's checkpoints verify under nothing in force
    with pytest.raises(Exception, match="key rotation does not verify"):
        AuditLog.open(log, new).close()


def test_a_rotation_keeps_the_log_name(tmp_path: Path) -> None:
    old, _, _ = _keys(tmp_path)
    with AuditLog.open(tmp_path / "log", old) as opened, pytest.raises(KeyFileError, match="the log's name"):
        opened.rotate_key(SigningKey.generate("device.test/other"))


def test_audit_rotate_key_hands_the_log_over(tmp_path: Path, capsys) -> None:
    from specsteer.audit.note import load_signing_key, write_key_pair

    old_private, old_public = write_key_pair("device.test/log", tmp_path / "old")
    new_private, _ = write_key_pair("device.test/log", tmp_path / "new")
    log = tmp_path / "log"
    with AuditLog.open(log, load_signing_key(old_private)) as opened:
        run_session(EgressRecorder(opened), seed=0)
    assert main(["rotate-key", str(log), "--key", str(old_private), "--new-key", str(new_private)]) == 0
    assert "the log is handed over to device.test/log+" in capsys.readouterr().out
    with AuditLog.open(log, load_signing_key(new_private)) as reopened:
        run_session(EgressRecorder(reopened), seed=1)
    code, report = _verify(log, old_public, capsys)
    assert (code, report["verdict"]) == (0, "VERIFIED"), report


def _rotated_then_crashed(tmp: Path, old: SigningKey, new: SigningKey) -> tuple[Path, int]:
    """A log as a crash inside `rotate_key` leaves it: the handover record durable, the old key's
    checkpoint over it (size P+1) never written."""
    log = tmp / "log"
    opened = AuditLog.open(log, old, device=DEVICE)
    run_session(EgressRecorder(opened), seed=0)
    position = opened.rotate_key(new)
    opened._release()  # the process is gone: nothing more is written
    lines = (log / "checkpoints.jsonl").read_text().splitlines(keepends=True)
    assert f"\n{position + 1}\n" in json.loads(lines[-1])["note"], "the last checkpoint is the handover's"
    (log / "checkpoints.jsonl").write_text("".join(lines[:-1]))
    return log, position


def test_a_rotation_cut_short_is_finished_by_running_rotate_key_again(tmp_path: Path, capsys) -> None:
    from specsteer.audit.note import load_signing_key, write_key_pair

    old_private, old_public = write_key_pair("device.test/log", tmp_path / "old")
    new_private, _ = write_key_pair("device.test/log", tmp_path / "new")
    log, position = _rotated_then_crashed(tmp_path, load_signing_key(old_private), load_signing_key(new_private))
    assert main(["rotate-key", str(log), "--key", str(old_private), "--new-key", str(new_private)]) == 0
    assert f"record {position}: the log is handed over to" in capsys.readouterr().out
    notes = [json.loads(line)["note"] for line in (log / "checkpoints.jsonl").read_text().splitlines()]
    assert f"\n{position + 1}\n" in notes[-1], "the old key signed its checkpoint over the handover"
    other_private, _ = write_key_pair("device.test/log", tmp_path / "other")
    assert main(["rotate-key", str(log), "--key", str(old_private), "--new-key", str(other_private)]) != 0
    assert "belongs to key" in capsys.readouterr().err  # the handover stands: the old key cannot hand it again
    with AuditLog.open(log, load_signing_key(new_private)) as reopened:
        run_session(EgressRecorder(reopened), seed=1)
    with AuditLog.open(log, load_signing_key(new_private)):
        pass
    code, report = _verify(log, old_public, capsys)
    assert (code, report["verdict"]) == (0, "VERIFIED"), report


def test_a_rotation_cut_short_leaves_a_log_the_new_key_keeps_writing(tmp_path: Path, capsys) -> None:
    """The new key cannot sign the handover's checkpoint (size P+1, the old key's): it leaves that size
    unsigned and signs from the next record on, so the log verifies (a new-key checkpoint of size P+1
    would fail `checkpoints`)."""
    old, new, pub = _keys(tmp_path)
    log, position = _rotated_then_crashed(tmp_path, old, new)
    with AuditLog.open(log, new) as reopened:
        assert reopened.size == position + 1
        run_session(EgressRecorder(reopened), seed=1)
    with AuditLog.open(log, new) as again:
        run_session(EgressRecorder(again), seed=2)
    code, report = _verify(log, pub, capsys)
    assert (code, report["verdict"]) == (0, "VERIFIED"), report
    with pytest.raises(LogHandedOver, match=f"handed over at record {position}"):
        AuditLog.open(log, old)
