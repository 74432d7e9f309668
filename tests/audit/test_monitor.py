"""`audit monitor` (issue 48, Build 6): published checkpoints and witness states followed over runs.

Every checkpoint is signed by a real device log (`AuditLog`, sessions through the real recorder),
published with the real `audit export`, and cosigned by real C2SP tlog-witnesses (`TlogWitness`,
the code `audit witness serve` runs, called without the HTTPS layer), each with its own SQLite state.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specsteer.audit import merkle
from specsteer.audit.cli import main
from specsteer.audit.cosignature import WitnessSigner, write_witness_key_pair
from specsteer.audit.log import AuditLog, scan_log
from specsteer.audit.note import SigningKey, open_checkpoint
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.witness_client import add_checkpoint_body
from specsteer.audit.witness_service import KnownLogs, TlogWitness
from tests.audit.helpers import run_session

ORIGIN = "device.test/alice"


@dataclass
class Witness:
    service: TlogWitness
    pub: Path
    state: Path

    def cosign(self, log_dir: Path, key: SigningKey) -> None:
        """Send the log's latest checkpoint, proving from this witness's last size; keep its cosignature."""
        leaves = [r.leaf for r in scan_log(log_dir).records]
        with AuditLog.open(log_dir, key) as log:
            note = log.checkpoint()
            cp = open_checkpoint(note, key.verifier)
            held = self.service.latest(ORIGIN)
            old = 0 if held is None else held[0]
            proof = merkle.consistency_proof(old, leaves[: cp.size]) if 0 < old < cp.size else []
            answer = self.service.add_checkpoint(add_checkpoint_body(old, proof, note))
            assert answer.status == 200, answer.body
            log.store_cosigned(note + answer.body, key=self.service.signer.key)


@dataclass
class World:
    tmp: Path
    key: SigningKey
    pub: Path
    w1: Witness
    w2: Witness
    published: Path
    state: Path

    def log(self, name: str, seeds: list[int], *, base: Path | None = None) -> Path:
        """A device log (a copy of `base`, if given) with one more session per seed."""
        folder = self.tmp / name
        if base is not None:
            shutil.copytree(base, folder, ignore=shutil.ignore_patterns("lock"))
        with AuditLog.open(folder, self.key) as log:
            rec = EgressRecorder(log)
            for seed in seeds:
                run_session(rec, seed=seed)
        return folder

    def publish(self, log_dir: Path) -> None:
        """What the device (or its operator) publishes: an `audit export` bundle, replacing the last one."""
        out = self.published / "alice"
        shutil.rmtree(out, ignore_errors=True)
        assert main(["export", str(log_dir), "--out", str(out), "--key", str(self.pub), "--quiet"]) == 0

    def monitor(self, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
        capsys.readouterr()  # what `audit export` printed
        argv = ["monitor", str(self.published), "--state", str(self.state), "--once", "--json"]
        argv += ["--witness-key", str(self.w1.pub), "--witness-key", str(self.w2.pub)]
        argv += ["--witness-state", str(self.w1.state), "--witness-state", str(self.w2.state), *extra]
        code = main(argv)
        return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def world(tmp_path: Path) -> World:
    key = SigningKey.generate(ORIGIN)
    pub = tmp_path / "alice.pub"
    pub.write_text(f"{key.verifier}\n")
    logs = tmp_path / "witnessed-logs"
    logs.write_text(f"{key.verifier}\n")

    def witness(name: str) -> Witness:
        private, public = write_witness_key_pair(f"witness.test/{name}", tmp_path / name)
        signer = WitnessSigner.parse(private.read_text())
        state = tmp_path / name / "state.sqlite"
        return Witness(TlogWitness(signer, state, KnownLogs(logs)), public, state)

    published = tmp_path / "published"
    published.mkdir()
    w = World(tmp_path, key, pub, witness("w1"), witness("w2"), published, tmp_path / "monitor.sqlite")
    yield w
    w.w1.service.close()
    w.w2.service.close()


def _policy(w: World, quorum: int) -> Path:
    path = w.tmp / "policy.toml"
    lines = [f"quorum = {quorum}"]
    for witness in (w.w1, w.w2):
        lines += ["[[witness]]", f'key = "{witness.pub.read_text().strip()}"', 'url = "https://w.example"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _kinds(out: dict) -> list[str]:
    return [a["kind"] for a in out["alarms"]]


def test_an_honest_log_growing_over_two_runs_is_consistent(world: World, capsys) -> None:
    w = world
    policy = ["--witness-policy", str(_policy(w, 2))]
    first = w.log("first", [0])
    for witness in (w.w1, w.w2):
        witness.cosign(first, w.key)
    w.publish(first)
    code, out = w.monitor(*policy, capsys=capsys)
    size = len(scan_log(first).records)
    assert (code, out["alarms"], out["logs"][ORIGIN]["size"]) == (0, [], size), out
    grown = w.log("grown", [1, 2], base=first)
    for witness in (w.w1, w.w2):
        witness.cosign(grown, w.key)  # each proves consistency from what it cosigned before
    w.publish(grown)
    code, out = w.monitor(*policy, capsys=capsys)
    assert (code, out["alarms"], out["logs"][ORIGIN]["size"]) == (0, [], len(scan_log(grown).records)), out
    # The text form: one line per log, and nothing on stderr.
    capsys.readouterr()
    assert main(["monitor", str(w.published), "--state", str(w.state), "--once"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"log {ORIGIN}: size ") and "consistent" in captured.out and not captured.err


def test_a_witness_ahead_of_the_publication_is_no_rollback(world: World, capsys) -> None:
    w = world
    first = w.log("first", [0])
    w.publish(first)
    grown = w.log("grown", [1], base=first)
    w.w1.cosign(grown, w.key)  # the witness saw the log grow; the next export is not out yet
    for _ in range(2):  # and again, the export still lagging: the witness's size is not the log's to keep
        code, out = w.monitor(capsys=capsys)
        assert (code, out["logs"][ORIGIN]["size"]) == (0, len(scan_log(first).records)), out
    w.publish(grown)
    code, out = w.monitor(capsys=capsys)
    assert (code, out["logs"][ORIGIN]["size"]) == (0, len(scan_log(grown).records)), out


def test_a_split_view_cosigned_by_different_witnesses_is_raised(world: World, capsys) -> None:
    """One key, two histories of the same size: w1 cosigns branch A (which is published), w2 cosigns
    branch B (which only its state shows). Each witness's own checks pass; the monitor sees both."""
    w = world
    branch_a = w.log("branch-a", [0])
    branch_b = w.log("branch-b", [9])
    assert len(scan_log(branch_a).records) == len(scan_log(branch_b).records)
    w.w1.cosign(branch_a, w.key)
    w.w2.cosign(branch_b, w.key)
    w.publish(branch_a)
    code, out = w.monitor(capsys=capsys)
    assert code == 1 and "split-view" in _kinds(out), out
    (split,) = [a for a in out["alarms"] if a["kind"] == "split-view"]
    assert split["message"].startswith(f"split view: log {ORIGIN} has 2 checkpoints of size ")
    assert "cosigned by witness.test/w1" in split["message"] and "cosigned by witness.test/w2" in split["message"]
    assert out["logs"][ORIGIN]["size"] is None  # nothing of a log with an alarm is kept as seen
    # The text form: one sentence per alarm, and a line on stderr.
    capsys.readouterr()
    assert main(["monitor", str(w.published), "--state", str(w.state), "--once", "--witness-state",
                 str(w.w2.state), "--witness-key", str(w.w2.pub)]) == 1  # fmt: skip
    captured = capsys.readouterr()
    assert captured.out.startswith("ALARM split view: ") and captured.err.startswith("audit: 1 alarm(s)")


def test_a_rollback_below_what_an_earlier_run_saw_is_raised(world: World, capsys) -> None:
    w = world
    short = w.log("short", [0])
    full = w.log("full", [1], base=short)
    other = w.log("other", [7], base=short)  # the same size as `full`, another last session
    assert len(scan_log(other).records) == len(scan_log(full).records)
    w.publish(full)
    assert w.monitor(capsys=capsys)[0] == 0
    # Same size, another root: the history the monitor saw was rewritten.
    w.publish(other)
    code, out = w.monitor(capsys=capsys)
    assert code == 1 and _kinds(out) == ["rollback"], out
    assert "with a root other than the one the monitor saw before" in out["alarms"][0]["message"]
    # Larger, but not an extension of what it saw: the consistency proof from the seen checkpoint fails.
    w.publish(w.log("other-grown", [8], base=other))
    code, out = w.monitor(capsys=capsys)
    assert code == 1 and _kinds(out) == ["rollback", "rollback"], out
    assert "do not extend the checkpoint of size" in out["alarms"][1]["message"], out
    # Smaller: the log went back to before what the monitor saw (and its alarm repeats every run).
    for _ in range(2):
        w.publish(short)
        code, out = w.monitor(capsys=capsys)
        size = len(scan_log(full).records)
        assert code == 1 and any(
            a["message"].startswith(f"rollback: log {ORIGIN} now publishes checkpoints up to size ")
            and f"below the size {size} the monitor saw" in a["message"]
            for a in out["alarms"]
        ), out
    # Withdrawn altogether: also an alarm.
    shutil.rmtree(w.published / "alice")
    code, out = w.monitor(capsys=capsys)
    assert code == 1 and _kinds(out) == ["withdrawn"], out


def test_a_missing_quorum_under_a_policy_is_reported(world: World, capsys) -> None:
    w = world
    first = w.log("first", [0])
    for witness in (w.w1, w.w2):
        witness.cosign(first, w.key)
    grown = w.log("grown", [1], base=first)
    w.w1.cosign(grown, w.key)  # w2 is down: only w1 cosigns the new checkpoint
    w.publish(grown)
    code, out = w.monitor("--witness-policy", str(_policy(w, 1)), capsys=capsys)
    assert (code, out["alarms"]) == (0, []), out  # 1 of 2 is met
    code, out = w.monitor("--witness-policy", str(_policy(w, 2)), capsys=capsys)
    assert code == 1 and _kinds(out) == ["quorum"], out
    size = len(scan_log(grown).records)
    assert out["alarms"][0]["message"].startswith(
        f"missing quorum: the latest checkpoint of log {ORIGIN} (size {size}) is cosigned by 1 of the 2 witnesses"
    )
    assert f"the quorum covers size {len(scan_log(first).records)} only" in out["alarms"][0]["message"]


def test_a_witness_whose_state_went_back_is_raised(world: World, capsys) -> None:
    w = world
    first = w.log("first", [0])
    w.w1.cosign(first, w.key)
    saved = w.tmp / "w1-before.sqlite"
    shutil.copy(w.w1.state, saved)
    grown = w.log("grown", [1], base=first)
    w.w1.cosign(grown, w.key)
    w.publish(grown)
    assert w.monitor(capsys=capsys)[0] == 0
    shutil.copy(saved, w.w1.state)  # the witness's database restored from an older copy
    code, out = w.monitor(capsys=capsys)
    assert code == 1 and _kinds(out) == ["witness-rollback"], out


def test_a_broken_publication_is_an_alarm_and_the_others_are_still_checked(world: World, capsys) -> None:
    w = world
    w.publish(w.log("first", [0]))
    (w.published / "bob").mkdir()
    (w.published / "bob" / "device.pub").write_text("not a key\n")
    code, out = w.monitor(capsys=capsys)
    assert code == 1 and _kinds(out) == ["unreadable"], out
    assert out["alarms"][0]["message"].startswith("publication bob cannot be read: ")
    assert out["logs"][ORIGIN]["alarms"] == 0 and out["logs"][ORIGIN]["size"] is not None


def test_unusable_inputs_are_one_sentence(world: World, tmp_path: Path, capsys) -> None:
    w = world
    bad_state = tmp_path / "bad.sqlite"
    bad_state.write_text("not a database, but long enough to be read as one by sqlite\n" * 20)
    import sqlite3

    w.publish(w.log("first", [0]))
    capsys.readouterr()
    other = sqlite3.connect(w.state.parent / "held.sqlite", isolation_level=None)
    main(["monitor", str(w.published), "--state", str(w.state.parent / "held.sqlite"), "--once"])
    capsys.readouterr()
    other.execute("BEGIN EXCLUSIVE")  # a second monitor holds the state mid-pass
    held = ["monitor", str(w.published), "--state", str(w.state.parent / "held.sqlite"), "--once"]
    for argv, says in [
        (held, "held.sqlite: database is locked"),
        (["monitor", str(tmp_path / "nowhere"), "--state", str(w.state), "--once"], "is not a folder of published"),
        (["monitor", str(w.published), "--state", str(bad_state), "--once"], "bad.sqlite: file is not a database"),
        (
            ["monitor", str(w.published), "--state", str(w.state), "--once", "--witness-state", str(w.w1.state)],
            "which no --witness-key or --witness-policy names",
        ),
    ]:
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("audit: ") and says in err and "Traceback" not in err and err.count("\n") == 1, err
    other.close()


def test_as_a_service_it_polls_and_stops_cleanly_on_sigterm(world: World) -> None:
    w = world
    w.publish(w.log("first", [0]))
    argv = [sys.executable, "-m", "specsteer.audit", "monitor", str(w.published), "--state", str(w.state),
            "--interval", "0.2", "--json"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        while not first.startswith("}"):
            first = proc.stdout.readline()  # the first pass's JSON object has ended
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert out.count('"ok": true') >= 1
