"""Witnesses that are not the operator (issue 48, Build 1): `audit witness serve` over HTTPS, a
witness policy of k of n, and `audit verify --witness-policy`.

On loopback: a real verifier over mutual TLS (its own witness answers each Close), two C2SP
tlog-witness services reached by the device directly over HTTPS, the tiny models. Policy 2 of 3.
"""

from __future__ import annotations

import json
import shutil
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cli import main
from specsteer.audit.cosignature import WitnessSigner, add_cosignature, load_witness_signer, write_witness_key_pair
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import CHECKPOINTS_FILE, AuditLog, scan_log
from specsteer.audit.note import Checkpoint, SigningKey, open_checkpoint, sign_checkpoint
from specsteer.audit.policy import load_policy
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.witness_client import DeviceWitnessing, add_checkpoint_body
from specsteer.audit.witness_service import KnownLogs, TlogWitness, serve
from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.sdk.audited import AuditedTap, WitnessReport
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server import pki as pki_mod
from specsteer.server.session import CloudVerifier
from tests.audit.helpers import checkpoint_notes, resign_witness_requests, run_session, write_checkpoint_notes
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote
from tests.verifier_harness import serve as serve_verifier


@dataclass
class Service:
    name: str
    signer: WitnessSigner
    witness: TlogWitness
    server: object
    thread: threading.Thread
    url: str

    def stop(self) -> None:
        self.server.shutdown()  # type: ignore[attr-defined]
        self.server.server_close()  # type: ignore[attr-defined]
        self.thread.join(timeout=5)


@contextmanager
def witness_service(tmp: Path, name: str, logs: Path, ca: pki_mod.Issued) -> Iterator[Service]:
    """A real `audit witness serve` (the same objects), on a free loopback port, its own key and state."""
    folder = tmp / name
    private, _ = write_witness_key_pair(f"witness.test/{name}", folder)
    signer = load_witness_signer(private)
    leaf = pki_mod.issue_leaf(ca, f"{name}.witness.test", hosts=["127.0.0.1"])
    cert, key = pki_mod.write_issued(folder, "tls", leaf)
    witness = TlogWitness(signer, folder / "state.sqlite", KnownLogs(logs))
    server = serve(witness, "127.0.0.1", 0, cert, key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    service = Service(name, signer, witness, server, thread, f"https://127.0.0.1:{server.server_address[1]}")
    try:
        yield service
    finally:
        if thread.is_alive():
            service.stop()
        witness.close()


def _verify(log: Path, pub: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["verify", str(log), "--key", str(pub), *extra, "--json"])
    return code, json.loads(capsys.readouterr().out)


@dataclass
class Setup:
    tmp: Path
    key: SigningKey
    pub: Path
    policy: Path
    verifier_witness: Path  # its signing key (the operator's)
    services: list[Service]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    key = SigningKey.generate("device.test/alice")
    pub = tmp_path / "alice.pub"
    pub.write_text(f"{key.verifier}\n")
    logs = tmp_path / "witnessed-logs"
    logs.write_text(f"# the device logs these witnesses serve\n{key.verifier}\n")
    ca = pki_mod.new_ca("witness TLS CA")
    (tmp_path / "witness-ca.pem").write_bytes(ca.cert_pem)
    private, verifier_pub = write_witness_key_pair("verifier.test/witness", tmp_path / "verifier")
    with witness_service(tmp_path, "w1", logs, ca) as w1, witness_service(tmp_path, "w2", logs, ca) as w2:
        policy = tmp_path / "policy.toml"
        lines = ["quorum = 2"]
        for s in (w1, w2):
            lines += ["[[witness]]", f'key = "{s.signer.key}"', f'url = "{s.url}"', 'ca = "witness-ca.pem"']
        lines += ["[[witness]]", f'key = "{verifier_pub.read_text().strip()}"']
        policy.write_text("\n".join(lines) + "\n")
        yield Setup(tmp_path, key, pub, policy, private, [w1, w2])


@contextmanager
def device(s: Setup, char_tok, log_dir: Path) -> Iterator[tuple[AuditedTap, object]]:
    """The verifier (its own witness on) and the device's audit log with the policy, as the client opens them."""
    specialist = Specialist(tiny_lm(char_tok, seed=1))
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2), specialist.lm, seed=0)
    pki = make_pki(s.tmp / "pki-root")
    policy = load_policy(s.policy)
    identity = DeviceIdentity.from_pem(pki.device_cert("alice").read_bytes())
    assert policy.via_verifier is not None
    with (
        serve_verifier(cloud, pki, witness_key=s.verifier_witness) as (_, port),
        AuditLog.open(
            log_dir, s.key, device=identity, witness_key=policy.via_verifier.key, policy_keys=policy.keys
        ) as log,
    ):
        recorder = EgressRecorder(log)
        witnessing = DeviceWitnessing(log, policy)
        recorder.on_cosigned = witnessing.verifier_answered
        tap = AuditedTap(recorder, witnessing)
        with remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=tap) as verifier:

            def session(prompt: str) -> WitnessReport:
                out = generate(specialist, prompt, SessionParams(gamma=0.05), DecodeOptions(6), verifier)
                assert out.stats.fallback is None
                return tap.witness_report()  # what SpecSteerClient does after each generation

            yield tap, session


def test_two_of_three_witnesses_one_of_them_the_verifier(setup: Setup, char_tok, capsys) -> None:
    s = setup
    log = s.tmp / "log"
    policy = ["--witness-policy", str(s.policy)]
    with device(s, char_tok, log) as (_, session):
        report = session("Hi there")
        assert (report.cosigners, report.quorum, report.faults, report.problems) == (3, 2, (), ())
        assert report.stats() == {"witness_faults": 0.0, "witness_cosigners": 3.0, "witness_quorum_met": 1.0}
        honest = s.tmp / "honest"
        shutil.copytree(log, honest, ignore=shutil.ignore_patterns("lock"))

        s.services[0].stop()  # one witness down: the other and the verifier's still make 2 of 3
        report = session("refs: speed")
        assert (report.cosigners, report.problem()) == (2, None)
        assert "w1 at https://127.0.0.1" in report.problems[0] and "unreachable" in report.problems[0]
        one_down = s.tmp / "one-down"
        shutil.copytree(log, one_down, ignore=shutil.ignore_patterns("lock"))

        s.services[1].stop()  # two down: the new checkpoint has only the verifier's cosignature
        report = session("Hello")
        assert report.cosigners == 1 and report.stats()["witness_quorum_met"] == 0.0
        assert report.problem() is not None and report.problem().startswith("only 1 of the 2 witnesses")

    for folder in (honest, one_down):
        code, out = _verify(folder, s.pub, *policy, capsys=capsys)
        assert (code, out["verdict"]) == (0, "VERIFIED"), out
        (check,) = [c for c in out["checks"] if c["name"] == "witness cosignatures"]
        assert any(n.startswith("every record lies within the last checkpoint the witness policy's quorum")
                   for n in check["notes"]), check  # fmt: skip
    # Build 4: a key holder appends a fell-back session after the last witnessed checkpoint and re-signs.
    fabricated = s.tmp / "fabricated"
    shutil.copytree(honest, fabricated, ignore=shutil.ignore_patterns("lock"))
    size = len(scan_log(fabricated).records)
    with AuditLog.open(fabricated, s.key) as appended:
        rec = EgressRecorder(appended)
        sid = run_session(rec, seed=7, close=False)
        rec.on_fallback(sid, "verifier-unreachable")
    assert main(["verify", str(fabricated), "--key", str(s.pub)]) == 0  # the device's key alone cannot tell
    capsys.readouterr()
    code, out = _verify(fabricated, s.pub, *policy, capsys=capsys)
    assert (code, out["verdict"]) == (3, "UNPROVEN") and out["checks_passed"], out
    (check,) = [c for c in out["checks"] if c["name"] == "witness cosignatures"]
    tail = len(scan_log(fabricated).records) - size
    assert any(n.startswith(f"{tail} record(s) (from position {size}) lie after the last checkpoint the witness "
                            f"policy's quorum (2 of 3 (witness.test/w1, witness.test/w2, verifier.test/witness)) "
                            f"cosigned (size {size})") for n in check["notes"]), check["notes"]  # fmt: skip
    code, out = _verify(log, s.pub, *policy, capsys=capsys)
    assert (code, out["verdict"]) == (3, "UNPROVEN"), out
    assert out["unwitnessed"].startswith("unwitnessed tail: 1 session(s)") and "2 of 3" in out["unwitnessed"]
    # Each witness's own state holds what it cosigned: the latest size it saw of this log.
    for service in s.services:
        latest = service.witness.latest("device.test/alice")
        assert latest is not None and latest[0] <= scan_log(log).records[-1].position + 1


def test_the_verifier_alone_cannot_make_a_rewritten_log_verify(setup: Setup, char_tok, capsys) -> None:
    """Whoever holds the device's key and the verifier's witness key and state rewrites a session,
    re-signs it, and has the verifier's witness cosign the new history: 1 of 3 is below the quorum."""
    s = setup
    log = s.tmp / "log"
    with device(s, char_tok, log) as (_, session):
        assert session("Hi there").cosigners == 3
    forged = s.tmp / "forged"
    shutil.copytree(log, forged, ignore=shutil.ignore_patterns("lock"))
    recs = [records.parse(r.data).fields for r in scan_log(forged).records]
    up = next(i for i, f in enumerate(recs) if f["kind"] == records.KIND_UPLINK)
    msg = wire.pb.Uplink.FromString(records.parse(scan_log(forged).records[up].data).payload or b"")
    msg.open.prompt_ids[0] = (msg.open.prompt_ids[0] + 1) % 40
    recs[up] = {**recs[up], **records.payload_fields("up", msg.SerializeToString(deterministic=True))}
    shutil.rmtree(forged / "segments")
    (forged / "segments").mkdir()
    (forged / "segments" / "seg-000000000000.log").write_bytes(resign_witness_requests(recs, s.key))
    kept = checkpoint_notes(forged)
    (forged / CHECKPOINTS_FILE).unlink()
    with AuditLog.open(forged, s.key) as rewritten:
        note = rewritten.checkpoint()
    operator = load_witness_signer(s.verifier_witness)
    cp = open_checkpoint(note, s.key.verifier)
    write_checkpoint_notes(forged, [note, add_cosignature(note, operator.name, operator.cosign(cp, int(time.time())))])
    policy = ["--witness-policy", str(s.policy)]
    code, out = _verify(forged, s.pub, *policy, capsys=capsys)
    assert out["verdict"] != "VERIFIED" and code != 0, out
    assert out["unwitnessed"] is not None or not out["checks_passed"]
    # Keeping the independent witnesses' cosignatures of the true history only makes it FAIL.
    write_checkpoint_notes(forged, [*kept, *checkpoint_notes(forged)])
    code, out = _verify(forged, s.pub, *policy, capsys=capsys)
    assert (code, out["verdict"]) == (1, "FAILED"), out


def test_the_witness_service_answers_as_c2sp_tlog_witness(setup: Setup) -> None:
    """Its HTTP answers, by status: 404 unknown origin, 403 a bad signature, 400 old above size, 409
    with its size for a stale old size or a fork, 422 a bad proof, 503 a clock it cannot sign."""
    w = setup.services[0]
    key = setup.key

    def post(old: int, proof: list[bytes], note: str) -> tuple[int, str, str]:
        request = urllib.request.Request(
            f"{w.url}/add-checkpoint", add_checkpoint_body(old, proof, note), method="POST"
        )
        context = ssl.create_default_context(cafile=str(setup.tmp / "witness-ca.pem"))
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return response.status, response.headers.get("Content-Type", ""), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()

    def note_of(size: int, root: bytes, signer: SigningKey = key) -> str:
        return sign_checkpoint(Checkpoint(signer.name, size, root), signer)

    root = bytes(32)
    # A client that connects and never says a word does not hold up the others (the handshake runs
    # in its connection's own thread).
    import socket

    with socket.create_connection(("127.0.0.1", int(w.url.rsplit(":", 1)[1])), timeout=5):
        assert post(0, [], note_of(1, root, SigningKey.generate("device.test/mallory")))[0] == 404
    assert post(0, [], note_of(1, root, SigningKey.generate(key.name)))[0] == 403
    assert post(2, [], note_of(1, root))[0] == 400
    status, _, body = post(0, [], note_of(1, root))
    assert status == 200 and body.startswith(f"— {w.signer.name} ")
    status, content_type, body = post(0, [], note_of(2, root))
    assert (status, content_type, body) == (409, "text/x.tlog.size", "1\n")
    assert post(1, [], note_of(1, b"\x01" * 32))[0] == 409  # a second root for size 1: a fork
    assert post(1, [b"\x02" * 32], note_of(2, b"\x03" * 32))[0] == 422
    # A stale or future clock: the witness refuses to date a cosignature it cannot stand behind
    # (0, before 2024, beyond 2^40, or before the last cosignature it gave this log).
    last = w.witness.latest(key.name)
    assert last is not None
    for now in (0.0, 1.0, 2.0**41, last[2] - 3600.0):
        w.witness._clock = lambda now=now: now  # the service's clock, for the test
        assert post(1, [], note_of(1, root))[0] == 503
    refusals = w.witness.db.execute("SELECT status, reason FROM refusals").fetchall()
    assert [r[0] for r in refusals] == [403, 400, 409, 409, 422, 503, 503, 503, 503]


def test_audit_witness_serve_runs_as_its_own_process(setup: Setup, tmp_path: Path) -> None:
    """The command itself: its key file private, it prints where it listens, it cosigns, and the
    verifier's keys are nowhere in its arguments."""
    import subprocess
    import sys

    folder = setup.tmp / "w1"
    private = folder / "witness.test_w1.witness.key"
    argv = [sys.executable, "-m", "specsteer.audit", "witness", "serve", "--key", str(private), "--state",
            str(tmp_path / "own.sqlite"), "--logs", str(setup.tmp / "witnessed-logs"), "--listen", "127.0.0.1:0",
            "--tls-cert", str(folder / "tls.pem"), "--tls-key", str(folder / "tls.key")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("witness witness.test/w1+") and "listening on https://127.0.0.1:" in line, line + (
            proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
        )
        url = line.rsplit(" ", 1)[1].strip()
        note = sign_checkpoint(Checkpoint(setup.key.name, 1, bytes(32)), setup.key)
        context = ssl.create_default_context(cafile=str(setup.tmp / "witness-ca.pem"))
        request = urllib.request.Request(f"{url}/add-checkpoint", add_checkpoint_body(0, [], note), method="POST")
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            assert response.status == 200 and response.read().decode().startswith("— witness.test/w1 ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    private.chmod(0o644)
    assert main(["witness", "serve", *argv[argv.index("--key") :]]) == 1  # a key others can read: refused


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("quorum = 1\n", "it lists no witnesses"),
        ('quorum = 3\n[[witness]]\nkey = "{k1}"\n', "quorum must be a whole number from 1 to 1"),
        ('[[witness]]\nkey = "{k1}"\nurl = "http://w1.example"\n', "is not an https:// submission prefix"),
        ('[[witness]]\nkey = "{k1}"\n[[witness]]\nkey = "{k1}"\nurl = "https://a.example"\n', "listed twice"),
        ('[[witness]]\nkey = "{k1}"\n[[witness]]\nkey = "{k2}"\n', "only one witness can be asked through"),
        ('[[witness]]\nkey = "not a key"\n', "witness 1: a witness key reads"),
        ("[[witness]\n", "not TOML"),
        ('quorum = 1\nwitnesses = 2\n[[witness]]\nkey = "{k1}"\n', "unknown setting 'witnesses'"),
    ],
)
def test_a_bad_witness_policy_is_one_sentence(tmp_path: Path, body: str, says: str, capsys) -> None:
    k1, k2 = (WitnessSigner.generate(f"witness.test/{n}").key for n in ("a", "b"))
    policy = tmp_path / "policy.toml"
    policy.write_text(body.format(k1=k1, k2=k2))
    key = SigningKey.generate("device.test/alice")
    with AuditLog.open(tmp_path / "log", key):
        pass
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "log"), "--witness-policy", str(policy)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"audit: witness policy {policy}: ") and says in err and err.count("\n") == 1, err
