"""The verifier as the device log's witness, over a real mutual-TLS stream with the tiny models.

Each Close carries the device's signed checkpoint; the verifier answers with its cosignature,
which the device logs and keeps; `audit verify --witness-key` checks it, and the verifier's
state file remembers what it cosigned. A log rewritten after it was cosigned and re-signed with
the device's own key fails; a device whose log was swapped for another history is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cli import main
from specsteer.audit.cosignature import load_witness_key, write_witness_key_pair
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.witness_state import read_state
from specsteer.core import wire
from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.config import ServerConfig
from specsteer.server.session import CloudVerifier
from specsteer.server.witness import Cosigned, load_witness
from tests.audit.helpers import resign_witness_requests
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve


def _run(tmp: Path, char_tok, *, log_dir: Path, key: SigningKey, prompts: tuple[str, ...]) -> tuple[Path, Path]:
    specialist = Specialist(tiny_lm(char_tok, seed=1))
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2), specialist.lm, seed=0)
    pki = make_pki(tmp / "pki-root") if not (tmp / "pki-root").exists() else _reuse(tmp)
    witness_dir = tmp / "witness"
    if not witness_dir.exists():
        write_witness_key_pair("verifier.test/witness", witness_dir)
    private = witness_dir / "verifier.test_witness.witness.key"
    identity = DeviceIdentity.from_pem(pki.device_cert("alice").read_bytes())
    witness_pub = load_witness_key(witness_dir / "verifier.test_witness.witness.pub")
    with (
        serve(cloud, pki, witness_key=private) as (_, port),
        AuditLog.open(log_dir, key, device=identity, witness_key=witness_pub) as log,
        remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=EgressRecorder(log)) as verifier,
    ):
        for prompt in prompts:
            out = generate(specialist, prompt, SessionParams(gamma=0.05), DecodeOptions(6), verifier)
            assert out.stats.fallback is None
    return witness_dir / "verifier.test_witness.witness.pub", witness_dir / "witness-state.json"


def _reuse(tmp: Path):  # the PKI of an earlier run in the same folder
    from specsteer.server import pki as pki_mod

    return pki_mod.Pki(tmp / "pki-root" / "pki")


def _verify(log: Path, pub: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["verify", str(log), "--key", str(pub), *extra, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_each_close_is_cosigned_and_the_log_verifies_with_the_witness_key(
    tmp_path: Path, char_tok, capsys: pytest.CaptureFixture[str]
) -> None:
    key = SigningKey.generate("device.test/alice")
    pub = tmp_path / "alice.pub"
    pub.write_text(f"{key.verifier}\n")
    log = tmp_path / "log"
    witness_pub, state = _run(tmp_path, char_tok, log_dir=log, key=key, prompts=("Hi there", "refs: speed"))
    # The answer is on record: one cosignature downlink after each Close, and a cosigned checkpoint kept.
    answers = [
        wire.decode_cosignature(r.payload)
        for r in (records.parse(x.data) for x in scan_log(log).records)
        if r.kind == records.KIND_DOWNLINK and r.payload is not None
    ]
    assert sum(a is not None for a in answers) == 2
    assert sum(c.note.count("\n— verifier.test/witness ") for c in scan_log(log).checkpoints) == 2
    code, report = _verify(log, pub, "--witness-key", str(witness_pub), "--witness-state", str(state), capsys=capsys)
    assert (code, report["verdict"]) == (0, "VERIFIED"), report
    (check,) = [c for c in report["checks"] if c["name"] == "witness cosignatures"]
    assert "2 cosignature(s) by verifier.test/witness" in check["summary"]
    assert read_state(state).logs["alice"].key == str(key.verifier)

    # A rewrite after the cosignature, re-signed with the device's own key, fails with the witness key.
    forged = tmp_path / "forged"
    shutil.copytree(log, forged, ignore=shutil.ignore_patterns("lock"))
    recs = [records.parse(r.data).fields for r in scan_log(forged).records]
    up = next(i for i, f in enumerate(recs) if f["kind"] == records.KIND_UPLINK)
    msg = wire.pb.Uplink.FromString(records.parse(scan_log(forged).records[up].data).payload or b"")
    msg.open.prompt_ids[0] = (msg.open.prompt_ids[0] + 1) % 40
    recs[up] = {**recs[up], **records.payload_fields("up", msg.SerializeToString(deterministic=True))}
    seg = forged / "segments"
    shutil.rmtree(seg)
    seg.mkdir()
    (seg / "seg-000000000000.log").write_bytes(resign_witness_requests(recs, key))
    (forged / "checkpoints.jsonl").unlink()
    with AuditLog.open(forged, key):
        pass
    assert main(["verify", str(forged), "--key", str(pub)]) == 0  # the device's key alone cannot tell
    capsys.readouterr()
    code, report = _verify(forged, pub, "--witness-key", str(witness_pub), capsys=capsys)
    # The genuine answers no longer verify over the rewritten Closes: from the log alone that reads as
    # the cloud answering with invalid cosignatures (issue 48: a cloud's spoilt answer must not FAIL an
    # honest log), so nothing is cosigned and it is UNPROVEN, never VERIFIED; the witness's own state
    # shows the rewrite for what it is.
    assert (code, report["verdict"]) == (3, "UNPROVEN")
    assert report["cloud_misbehaviour"] and report["unwitnessed"]
    code, report = _verify(forged, pub, "--witness-key", str(witness_pub), "--witness-state", str(state), capsys=capsys)
    assert (code, report["verdict"]) == (1, "FAILED")

    # That rewritten history, brought to the witness, is refused and never cosigned.
    before = read_state(state)
    _run(tmp_path, char_tok, log_dir=forged, key=key, prompts=("Hello",))
    after = read_state(state)
    assert len(after.refusals) == len(before.refusals) + 1 and after.logs == before.logs
    assert not any("\n— verifier.test/witness " in c.note for c in scan_log(forged).checkpoints)


def test_the_witness_keeps_only_the_last_refusals_in_memory_too(tmp_path: Path, monkeypatch) -> None:
    """Only the state file was capped: a device sending bad checkpoints over and over grew the
    witness's memory for good (about 300 bytes a refusal)."""
    private, _ = write_witness_key_pair("verifier.test/witness", tmp_path)
    witness = load_witness(private)
    monkeypatch.setattr("specsteer.server.witness.MAX_REFUSALS", 3)
    for size in range(1, 6):
        bad = wire.WitnessRequest("device.test/log", b"\x01" * 32, size, b"\x02" * 32, b"\x03" * 64)
        assert not isinstance(witness.cosign("alice", bad), Cosigned)
    assert [r["size"] for r in witness.state.refusals] == [3, 4, 5]


def test_an_unreadable_witness_key_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read witness signing key"):
        load_witness(tmp_path / "missing.witness.key")
    private, public = write_witness_key_pair("verifier.test/witness", tmp_path)
    with pytest.raises(ConfigError, match="witness key is unusable"):
        load_witness(public)  # the public half is not a signing key
    with pytest.raises(ConfigError, match="witness_state needs witness_key"):
        ServerConfig(witness_state=tmp_path / "state.json")
    assert load_witness(private).state.logs == {}
