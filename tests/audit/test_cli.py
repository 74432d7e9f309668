"""The `audit` command: reports, JSON, exit codes, and one-sentence errors without tracebacks."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsteer.audit import merkle
from specsteer.audit.cli import main
from specsteer.audit.note import SigningKey, VerifierKey, load_signing_key, load_verifier_key, open_checkpoint
from specsteer.core.cli import EXIT_UNPROVEN
from tests.audit.helpers import BuiltLog, build_log, checkpoint_notes, delete_record, uplink_positions

ROOT = Path(__file__).parents[2]


@pytest.fixture
def built(tmp_path: Path) -> BuiltLog:
    return build_log(tmp_path, sessions=2)


def test_verify_passes_with_exit_0_and_says_what_is_not_covered(
    built: BuiltLog, capsys: pytest.CaptureFixture[str]
) -> None:
    prev = built.directory.parent / "prev.note"
    prev.write_text(checkpoint_notes(built.directory)[0])
    assert main(["verify", str(built.directory), "--key", str(built.pub), "--checkpoint", str(prev)]) == 0
    out = capsys.readouterr().out
    assert ": VERIFIED" in out and "[ok] previous checkpoint" in out
    for gap in ("TLS metadata", "SNI", "client certificate", "DNS"):
        assert gap in out


def test_verify_json_and_a_failure_exit_1(built: BuiltLog, capsys: pytest.CaptureFixture[str]) -> None:
    delete_record(built.directory, uplink_positions(built.directory)[1])
    assert main(["verify", str(built.directory), "--key", str(built.pub), "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["ok"] is False
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    assert {"log integrity", "checkpoints", "session structure"} <= failed
    assert any("says it is record" in m for c in report["checks"] for m in c["failures"])
    assert len(report["not_covered"]) >= 4
    assert captured.err.startswith("audit: verification failed") and captured.err.count("\n") == 1


def test_show_lists_sessions(built: BuiltLog, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(built.directory)]) == 0
    out = capsys.readouterr().out
    assert out.count("ended: close") == 2 and built.sessions[0] in out
    assert main(["show", str(built.directory), "--json"]) == 0
    sessions = json.loads(capsys.readouterr().out)["sessions"]
    assert [s["rounds"] for s in sessions] == [2, 2] and [s["uplinks"] for s in sessions] == [4, 4]


def test_prove_inclusion_emits_a_proof_that_checks_out(built: BuiltLog, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove-inclusion", str(built.directory), "5", "--key", str(built.pub), "--json"]) == 0
    proof = json.loads(capsys.readouterr().out)
    cp = open_checkpoint(proof["checkpoint"], VerifierKey.parse(built.pub.read_text()))
    b = base64.b64decode
    merkle.verify_inclusion(5, cp.size, b(proof["leaf_hash"]), [b(h) for h in proof["proof"]], cp.root)
    assert proof["tree_size"] == cp.size and "record 5" in proof["record"]
    assert main(["prove-inclusion", str(built.directory), "999"]) == 1
    assert "no valid signed checkpoint covers record 999" in capsys.readouterr().err


def test_prove_inclusion_without_the_auditors_key_is_unproven(
    built: BuiltLog, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --key the checkpoint opens with the key the log names itself, which whoever rewrote the
    log could have put there: like `audit verify`, no key, no pass."""
    assert main(["prove-inclusion", str(built.directory), "5", "--json"]) == EXIT_UNPROVEN
    captured = capsys.readouterr()
    assert json.loads(captured.out)["key_pinned"] is False
    assert "unproven who signed it: give --key PUBKEY" in captured.err
    assert main(["prove-inclusion", str(built.directory), "5"]) == EXIT_UNPROVEN
    assert "(proof verified, RFC 9162" in capsys.readouterr().out


def test_export_writes_a_complete_evidence_bundle(built: BuiltLog, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert main(["export", str(built.directory), "--out", str(out), "--key", str(built.pub)]) == 0
    names = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert {
        "report.txt",
        "report.json",
        "device.pub",
        "latest.note",
        "MANIFEST.sha256",
        "log/checkpoints.jsonl",
    } <= names
    assert any(n.startswith("log/segments/seg-") for n in names) and "log/lock" not in names
    assert json.loads((out / "report.json").read_text())["ok"] is True
    for line in (out / "MANIFEST.sha256").read_text().splitlines():
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # The bundle's copy of the log verifies on its own, with the bundle's key.
    assert (
        main(["verify", str(out / "log"), "--key", str(out / "device.pub"), "--checkpoint", str(out / "latest.note")])
        == 0
    )
    assert main(["export", str(built.directory), "--out", str(out)]) == 1  # never overwrites


def test_export_keeps_the_largest_checkpoint_not_an_old_line_appended_last(
    built: BuiltLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anyone with write access appends a copy of the oldest checkpoint line: the bundle's latest.note
    must still sign the log's full size (else a later rollback passes --checkpoint latest.note), and
    verify names the line that the device cannot have written there."""
    cp_file = built.directory / "checkpoints.jsonl"
    lines = cp_file.read_text().splitlines(keepends=True)
    key = load_verifier_key(built.pub)
    sizes = [open_checkpoint(json.loads(line)["note"], key).size for line in lines]
    cp_file.write_text("".join(lines) + lines[0])
    out = tmp_path / "bundle"
    main(["export", str(built.directory), "--out", str(out), "--key", str(built.pub)])
    assert open_checkpoint((out / "latest.note").read_text(), key).size == max(sizes)
    capsys.readouterr()
    assert main(["verify", str(built.directory), "--key", str(built.pub), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    text = "\n".join(m for c in report["checks"] for m in c["failures"])
    assert f"checkpoint {len(lines)} (size {sizes[0]}) comes after checkpoint {len(lines) - 1}" in text, text


def test_keygen_writes_a_private_key_only_its_owner_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen", "--name", "acme.example/device-7", "--out", str(tmp_path)]) == 0
    private, public = tmp_path / "acme.example_device-7.key", tmp_path / "acme.example_device-7.pub"
    assert private.stat().st_mode & 0o077 == 0
    key = load_signing_key(private)
    assert isinstance(key, SigningKey) and load_verifier_key(public) == key.verifier
    assert main(["keygen", "--name", "acme.example/device-7", "--out", str(tmp_path)]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["keygen", "--name", "has space", "--out", str(tmp_path)]) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "{tmp}/nowhere"], "is not an audit log"),
        (["verify", "{log}", "--key", "{tmp}/missing.pub"], "cannot read verifier key"),
        (["verify", "{log}", "--key", "{tmp}/garbage.pub"], "verifier key reads"),
        (["verify", "{log}", "--checkpoint", "{tmp}/garbage.pub"], "previous checkpoint"),
    ],
)
def test_bad_input_is_one_sentence_and_no_traceback(
    built: BuiltLog, tmp_path: Path, argv: list[str], message: str
) -> None:
    (tmp_path / "garbage.pub").write_text("not a key\n")
    args = [a.format(tmp=tmp_path, log=built.directory) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "specsteer.audit.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr + proc.stdout


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["prove-inclusion", "log", "-3"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


@pytest.mark.parametrize(
    "argv", [["show", "{log}"], ["show", "{log}", "--json"], ["verify", "{log}", "--key", "{pub}", "--json"]]
)
def test_a_reader_that_closed_stdout_is_no_failure(built: BuiltLog, argv: list[str]) -> None:
    """`audit show LOG | head -1`: the reader goes away before the command is done writing. That is
    no failed check (exit 1): the command ends quietly with 128 + SIGPIPE, as a shell reports it."""
    args = [a.format(log=built.directory, pub=built.pub) for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write, so every write finds the pipe closed
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "specsteer.audit.cli", *args],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141  # 128 + SIGPIPE
    assert proc.stderr == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "{tmp}/nowhere", "--json"], "is not an audit log"),
        (["verify", "{log}", "--key", "{tmp}/missing.pub", "--json"], "cannot read verifier key"),
    ],
)
def test_verify_json_reports_an_unusable_input_as_json(
    built: BuiltLog, tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script parsing `audit verify --json` gets one JSON object even when the log could not be
    checked at all, with the same exit 1 and the same one sentence on stderr."""
    args = [a.format(tmp=tmp_path, log=built.directory) for a in argv]
    assert main(args) == 1
    captured = capsys.readouterr()
    answer = json.loads(captured.out)
    assert answer["verdict"] == "ERROR" and answer["ok"] is False
    assert message in answer["error"] and answer["log"] == args[1]
    assert captured.err == f"audit: {answer['error']}\n"


def test_show_and_prove_inclusion_json_report_an_unusable_input_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["show", str(tmp_path / "nowhere"), "--json"], ["prove-inclusion", str(tmp_path), "0", "--json"]):
        assert main(argv) == 1
        captured = capsys.readouterr()
        answer = json.loads(captured.out)
        assert answer["ok"] is False and "is not an audit log" in answer["error"]
        assert captured.err == f"audit: {answer['error']}\n"


def test_audit_quiet_drops_the_unproven_hint_and_keeps_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #46: `--quiet` on audit as on sdk and federation; the exit code (3) still says UNPROVEN."""
    # Prepare
    built = build_log(tmp_path, sessions=1)
    # Execute / Assert: without --key the verdict is UNPROVEN; the hint is a note.
    assert main(["verify", str(built.directory)]) == EXIT_UNPROVEN
    assert "audit: every check passed but authenticity is unproven" in capsys.readouterr().err
    assert main(["verify", str(built.directory), "--quiet"]) == EXIT_UNPROVEN
    captured = capsys.readouterr()
    assert captured.err == "" and "UNPROVEN" in captured.out
    assert main(["prove-inclusion", str(built.directory), "1", "--quiet"]) == EXIT_UNPROVEN
    assert capsys.readouterr().err == ""
    assert main(["verify", str(tmp_path / "nope"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("audit: ") and err.count("\n") == 1
