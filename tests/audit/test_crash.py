"""SIGKILL while appending, repeatedly: every run's log verifies and keeps every acknowledged record."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from specsteer.audit import records
from specsteer.audit.log import SEGMENTS_DIR, AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.verify import verify
from tests.audit.helpers import frame

ROOT = Path(__file__).parents[2]
RUNS = 6


def _wait_for_acks(out: Path, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if out.exists() and out.read_text().count("\nack ") >= 1:
            return
        assert proc.poll() is None, f"the writer died on its own: {out.read_text() if out.exists() else ''}"
        time.sleep(0.02)
    raise AssertionError("the writer acknowledged nothing in time")


def _acks(out: Path) -> list[tuple[int, str, str, str]]:
    acks = []
    for line in out.read_text().split("\n")[:-1]:  # a line cut by the kill has no newline: skip it
        if line.startswith("ack "):
            _, index, kind, session, digest = line.split(" ")
            acks.append((int(index), kind, session, digest))
    return acks


def test_sigkill_while_appending_loses_no_acknowledged_record(tmp_path: Path) -> None:
    rng = random.Random(4)
    key = SigningKey.generate("device.test/crash")
    key_file = tmp_path / "device.key"
    key_file.write_text(str(key))
    key_file.chmod(0o600)  # a signing key only its owner reads (issue #48, finding 8)
    log_dir = tmp_path / "log"
    acknowledged: list[tuple[int, str, str, str]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for run in range(RUNS):
        out = tmp_path / f"run{run}.out"
        with out.open("wb") as stdout:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.audit.crash_writer", str(log_dir), str(key_file), str(run)],
                cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, env=env,
            )  # fmt: skip
            _wait_for_acks(out, proc, time.monotonic() + 60)
            time.sleep(rng.uniform(0.05, 0.6))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        run_acks = _acks(out)
        assert run_acks, "the run acknowledged records before it was killed"
        acknowledged += run_acks

        scan = scan_log(log_dir)
        assert scan.problems == []  # a crash may tear the tail, never damage what came before
        if run % 2 == 1:
            # Also emulate a power loss mid-write: half a frame at the end of the last segment.
            path = max((log_dir / SEGMENTS_DIR).iterdir())  # the file being appended to
            with path.open("ab") as f:
                f.write(frame(records.encode({"kind": "half-written"}))[:17])
        with AuditLog.open(log_dir, key) as log:  # what the device does on its next start
            if run % 2 == 1:
                assert log.repairs, "the torn tail was cut and recorded"
        verify(log_dir, key=key.verifier)

        stored = scan_log(log_dir).records
        for index, kind, session, digest in acknowledged:
            rec = records.parse(stored[index].data)
            assert (rec.kind, rec.session) == (kind, session), f"acknowledged record {index} changed"
            if digest != "-":
                assert rec.fields["sha256"] == digest, f"acknowledged record {index} changed"
    assert len({a[2] for a in acknowledged}) > RUNS  # sessions ran across the kills
