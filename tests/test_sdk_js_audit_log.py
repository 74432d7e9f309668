"""The TypeScript device's audit log is held to the Python `audit verify` (issue #52): a log the
TypeScript device writes (`sdk-js/test/write-log.ts`: scripted sessions through its session loop and
`EgressRecorder`, cosigned by a witness whose key `server witness-key` made, signed with a key
`audit keygen` made) VERIFIES under the real CLI with the witness's key; one byte changed FAILS; a
lost verifier is on record and leaves the log UNPROVEN, not FAILED; a torn final write is cut when
the TypeScript device reopens the log, with the `repair` record and evidence the Python verifier
accepts; a generation resumed after a lost verifier verifies (its resumed Open carries only what
went up); the Python device takes the log over and appends to it. A log the TypeScript device hands
to a new key (`rotateKey`, docs/audit-format.md §5.1) verifies under the auditor's first key and the
Python device takes it over with the new one; a log the Python `audit rotate-key` handed over is
taken back by the TypeScript device with the new key only. Needs the built package (`make test-js`
builds it before `make test-fast`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from specsteer.audit.cli import main
from specsteer.audit.cosignature import load_witness_key, write_witness_key_pair
from specsteer.audit.errors import AuditError, KeyFileError
from specsteer.audit.log import AuditLog, scan_log
from specsteer.audit.note import load_signing_key, write_key_pair
from specsteer.audit.records import parse
from specsteer.core import wire

SDK_JS = Path(__file__).resolve().parent.parent / "sdk-js"
SCRIPT = SDK_JS / "dist" / "test" / "write-log.js"

# Skipped only where the package was never built; a built package without the writer fails.
pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (SDK_JS / "dist" / "src").is_dir(),
    reason="the TypeScript package is not built (make test-js builds sdk-js/dist)",
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("keys")
    key, pub = write_key_pair("device.example/alice", out)
    wkey, wpub = write_witness_key_pair("verifier.example/witness", out)
    # The log's next key: the same name (the log's origin stays), another key pair (§5.1).
    new_key, new_pub = write_key_pair("device.example/alice", out / "new")
    return {"key": key, "pub": pub, "wkey": wkey, "wpub": wpub, "new_key": new_key, "new_pub": new_pub}


def _run(log: Path, key: Path, keys: dict[str, Path], *extra: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: the TypeScript device cannot write an audit log"
    return subprocess.run(
        ["node", str(SCRIPT), str(log), str(key), str(keys["wkey"]), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _write(log: Path, keys: dict[str, Path], *extra: str, key: Path | None = None) -> dict[str, object]:
    done = _run(log, keys["key"] if key is None else key, keys, *extra)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> tuple[Path, dict[str, object]]:
    log = tmp_path_factory.mktemp("written") / "log"
    return log, _write(log, keys)


def _verify(log: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = main(["verify", str(log), "--key", str(keys["pub"]), "--witness-key", str(keys["wpub"]), "--json"])
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return code, report


def _failed(report: dict[str, object]) -> list[str]:
    checks = report["checks"]
    assert isinstance(checks, list)
    return [c["name"] for c in checks if not c["ok"]]


def test_the_typescript_devices_log_verifies_under_the_python_audit_verify(
    tmp_path: Path,
    keys: dict[str, Path],
    written: tuple[Path, dict[str, object]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "log"
    shutil.copytree(written[0], log)
    records = written[1]["records"]
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", [])
    assert report["records"] == records
    assert report["sessions"] == 3
    kinds = [parse(r.data).kind for r in scan_log(log).records]
    assert kinds[:4] == ["log-header", "device-cert", "session-begin", "uplink"]
    # The witness's cosignatures are kept beside the device's own checkpoints, one per Close.
    notes = (log / "checkpoints.jsonl").read_text(encoding="utf-8")
    assert notes.count("\\u2014 verifier.example/witness ") == 3

    # The Python device takes the log over where the TypeScript one left it, and it still verifies.
    with AuditLog.open(log, load_signing_key(keys["key"]), witness_key=load_witness_key(keys["wpub"])) as again:
        assert again.size == records
        assert again.cosigned is not None and again.cosigned[0] > 0
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"]) == (0, "VERIFIED")


def test_one_byte_changed_in_the_typescript_devices_log_fails(
    tmp_path: Path,
    keys: dict[str, Path],
    written: tuple[Path, dict[str, object]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "log"
    shutil.copytree(written[0], log)
    record = scan_log(log).records[5]  # an uplink: its payload's base64 holds the token IDs
    segment = log / "segments" / record.segment
    data = bytearray(segment.read_bytes())
    at = record.offset + 4 + record.data.index(b'"bytes":"') + 10
    data[at] = ord("A") if data[at] != ord("A") else ord("B")
    segment.write_bytes(bytes(data))
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"]) == (1, "FAILED")
    assert "log integrity" in _failed(report)


def test_a_lost_verifier_is_on_the_typescript_devices_record_and_leaves_it_unproven(
    tmp_path: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log"
    stats = _write(log, keys, "--lost")["stats"]
    assert isinstance(stats, list) and stats[-1]["fallback"] == "verifier-lost"
    last = parse(scan_log(log).records[-1].data)
    assert (last.kind, last.fields["reason"]) == ("fallback", "verifier-lost")
    # Signed, intact and in contract; the last session lies after the witness's last cosignature.
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (3, "UNPROVEN", [])
    assert "1 session(s)" in str(report["unwitnessed"])


def test_a_generation_the_typescript_device_resumed_after_a_lost_verifier_verifies(
    tmp_path: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The lost session ends on record; the new one's Open resumes only what the lost one sent up and
    had committed, which the Python contract checks against the log's earlier sessions."""
    log = tmp_path / "log"
    stats = _write(log, keys, "--resumed")["stats"]
    assert isinstance(stats, list) and (stats[-1]["resumed"], stats[-1]["fallback"]) == (1, None)
    recs = [parse(r.data) for r in scan_log(log).records]
    uplinks = [wire.decode_uplink(r.payload) for r in recs if r.kind == "uplink" and r.payload is not None]
    resumed = [f for f in uplinks if isinstance(f, wire.OpenFrame) and f.resume_ids]
    assert len(resumed) == 1 and resumed[0].prompt_ids == (5,)
    assert ("fallback", "verifier-lost") in [(r.kind, r.fields.get("reason")) for r in recs]
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", []), report


def test_a_torn_write_the_typescript_device_cut_verifies_under_the_python_audit_verify(
    tmp_path: Path,
    keys: dict[str, Path],
    written: tuple[Path, dict[str, object]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "log"
    shutil.copytree(written[0], log)
    segment = log / "segments" / "seg-000000000000.log"
    size = segment.stat().st_size
    first = scan_log(log).records[2]
    with segment.open("ab") as f:  # a crash mid-append: the next frame's first 30 bytes reached the disk
        f.write(segment.read_bytes()[first.offset : first.offset + 30])
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"]) == (1, "FAILED")  # torn until the device reopens the log
    _write(log, keys, "--reopen")
    last = parse(scan_log(log).records[-1].data)
    assert (last.kind, last.fields["offset"], last.fields["cut_bytes"]) == ("repair", size, 30)
    assert [p.name for p in (log / "torn").iterdir()] == [
        f"seg-000000000000.log.{size}.{last.fields['cut_sha256']}.bin"
    ]
    # The repair is signed and its evidence intact; it belongs to no session, so nothing is unwitnessed.
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", [])


def test_a_padded_typescript_devices_log_verifies_and_its_rounds_are_the_python_devices_bytes(
    tmp_path: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """With padded frames (the Python client's default) every round the TypeScript device logs is
    a PaddedRound of one size, the bytes the Python device's encoder gives for the same round."""
    log = tmp_path / "log"
    _write(log, keys, "--padded")
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", [])
    uplinks = [r.payload for r in map(parse, (x.data for x in scan_log(log).records)) if r.kind == "uplink"]
    rounds = [(f, raw) for raw in uplinks if raw and isinstance(f := wire.decode_uplink(raw), wire.RoundFrame)]
    assert rounds and all(frame.slots is not None for frame, _ in rounds)
    assert len({len(raw) for _, raw in rounds}) == 1
    for frame, raw in rounds:
        assert frame.slots is not None
        assert wire.encode_round(frame.seq, frame.commit, frame.draft, pad_to=frame.slots[1]) == raw


def test_the_typescript_devices_guarded_sessions_verify_with_their_decisions_on_record(
    tmp_path: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Under the egress guard the TypeScript device logs the prompt's redaction right after the Open,
    each decision before the round it shapes, placeholder IDs as the round's literals, and a
    keep-local session's end as a fallback; the Python contract checks every one of those."""
    log = tmp_path / "log"
    stats = _write(log, keys, "--guarded")["stats"]
    assert isinstance(stats, list)
    placeholder, keep_local = stats[-2:]
    assert placeholder["fallback"] is None and placeholder["guard"]["placeholder"] == 1
    assert keep_local["fallback"] == "guard-keep-local" and keep_local["guard"]["keep-local"] == 1
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", []), report
    decisions = {(d["decision"], d["placeholder"]) for d in report["guard_decisions"]}
    assert {("prompt-redact", "<EMAIL>"), ("placeholder", "<EMAIL>"), ("keep-local", "<EMAIL>")} <= decisions
    recs = [parse(r.data) for r in scan_log(log).records]
    literals = [
        f.literal
        for r in recs
        if r.kind == "uplink"
        and r.payload is not None
        and isinstance(f := wire.decode_uplink(r.payload), wire.RoundFrame)
    ]
    assert [lit for lit in literals if lit] == [(27, 35904, 29)]  # "<EMAIL>" in the default tokenizer, once
    assert ("fallback", "guard-keep-local") in [(r.kind, r.fields.get("reason")) for r in recs]


def _rotations(log: Path) -> list[int]:
    return [r.index for r in map(parse, (x.data for x in scan_log(log).records)) if r.kind == "key-rotation"]


def test_a_log_the_typescript_device_rotated_verifies_under_the_first_key_and_the_python_device_takes_it_over(
    tmp_path: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log"
    result = _write(log, keys, "--rotate", str(keys["new_key"]))
    [position] = _rotations(log)
    # The auditor keeps the key it was first given (`--key OLD.pub`); verify follows the handover.
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", [])
    checks = report["checks"]
    assert isinstance(checks, list)
    [log_key] = [c for c in checks if c["name"] == "log key"]
    assert f"record {position}: the log key was handed over to" in " ".join(log_key["notes"])
    # Each Close after the handover was cosigned under the new key, and the witness's lines are kept.
    notes = (log / "checkpoints.jsonl").read_text(encoding="utf-8")
    assert notes.count("\\u2014 verifier.example/witness ") == 3

    # The Python device takes the log over with the new key only, and it still verifies.
    with pytest.raises(KeyFileError, match="belongs to key"):
        AuditLog.open(log, load_signing_key(keys["key"]))
    with AuditLog.open(log, load_signing_key(keys["new_key"]), witness_key=load_witness_key(keys["wpub"])) as again:
        assert again.size == result["records"]
        assert again.cosigned is not None and again.cosigned[0] > position + 1
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", [])


def test_a_log_the_python_device_rotated_is_taken_back_by_the_typescript_device_with_the_new_key(
    tmp_path: Path,
    keys: dict[str, Path],
    written: tuple[Path, dict[str, object]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "log"
    shutil.copytree(written[0], log)
    assert main(["rotate-key", str(log), "--key", str(keys["key"]), "--new-key", str(keys["new_key"])]) == 0
    [position] = _rotations(log)
    # The old key no longer opens it: the TypeScript device fails closed.
    done = _run(log, keys["key"], keys, "--reopen")
    assert done.returncode != 0 and "belongs to key" in done.stderr
    result = _write(log, keys, key=keys["new_key"])  # three more sessions, under the new key
    assert isinstance(result["records"], int) and result["records"] > position + 1
    assert scan_log(log).records[-1].position == result["records"] - 1
    code, report = _verify(log, keys, capsys)
    assert (code, report["verdict"], _failed(report)) == (0, "VERIFIED", [])
    assert report["sessions"] == 6


def test_a_python_and_a_typescript_writer_exclude_each_other(tmp_path: Path, keys: dict[str, Path]) -> None:
    """One process appends at a time, whichever device it is: the TypeScript writer's lock (an
    open-file-description lock on Linux, Node having no flock) and the Python writer's meet on lock."""
    log = tmp_path / "log"
    key = load_signing_key(keys["key"])
    with AuditLog.open(log, key):
        refused = _run(log, keys["key"], keys, "--reopen")
        assert refused.returncode != 0
        assert f"the audit log {log} is open in another process" in refused.stderr
    # The TypeScript device holds it open: the Python device is refused until it closes.
    holder = subprocess.Popen(
        ["node", str(SCRIPT), str(log), str(keys["key"]), str(keys["wkey"]), "--hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert json.loads(holder.stdout.readline()) == {"held": True}
        with pytest.raises(AuditError, match="open in another process"):
            AuditLog.open(log, key)
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    AuditLog.open(log, key).close()  # released with the TypeScript writer's close
