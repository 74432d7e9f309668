"""Resuming a generation never sends what the egress guard held (issue #47, Build 5).

A real verifier on loopback (mutual TLS) is stopped mid-generation, right after the Specialist has
committed an e-mail address the guard holds back (a placeholder goes up instead), and a second one
starts on the same address: the device resumes there. The resumed Open carries the placeholder the
cloud saw, never the address; the text is the uninterrupted run's; the audit log verifies against
both verifiers' transcripts. The live recorder refuses, before it is sent, a resumed Open that
carries anything an earlier session did not send (fail closed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsteer.audit.cli import main as audit_main
from specsteer.audit.errors import EgressBlocked
from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey, write_key_pair
from specsteer.audit.recorder import EgressRecorder
from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.privacy.guard import PLACEHOLDERS, GuardPolicy
from specsteer.sdk.audited import open_audit_tap
from specsteer.sdk.decoding import DecodeOptions, generate
from specsteer.sdk.uplink_guard import guard_for_profile
from specsteer.server.grpc_server import VerifierServer, create_server
from specsteer.server.session import CloudVerifier
from tests.privacy.test_device_guard import EMAIL, PROMPT, TARGETS, profile_for, scripted_pair
from tests.verifier_harness import free_port, make_pki, remote, server_config

PARAMS = SessionParams(draft_len=4)


def test_a_resumed_open_carries_the_placeholder_never_the_held_span(tmp_path: Path, smol_tok, capsys) -> None:
    # Prepare: the Specialist writes an e-mail address the guard holds; a verifier on `port`.
    profile = profile_for("email")
    specialist, lm = scripted_pair(smol_tok, TARGETS["email"], profile)
    cloud = CloudVerifier(lm, lm, seed=0)
    guard = guard_for_profile(profile, smol_tok, GuardPolicy.PLACEHOLDER)
    pki, port = make_pki(tmp_path), free_port()
    private, public = write_key_pair("device.test/alice", tmp_path / "keys")
    transcripts = [tmp_path / "first", tmp_path / "second"]
    first, _ = create_server(server_config(pki, port=port, transcript_dir=transcripts[0]), cloud=cloud)
    first.start()
    second = None
    committed: list[int] = []

    def on_commit(tokens: list[int]) -> None:
        # Once the address is in the device's text: this verifier dies, another takes its address.
        nonlocal second
        committed.extend(tokens)
        if second is None and EMAIL in smol_tok.decode(committed):
            first.stop(grace=0)
            # Bound directly: `create_server`'s preflight probe would find the port in TIME_WAIT.
            second = VerifierServer(server_config(pki, port=port, transcript_dir=transcripts[1]), cloud)
            second.start()

    try:
        with (
            open_audit_tap(tmp_path / "log", private, pki.device_cert("alice")) as tap,
            remote(port, pki, vocab_size=lm.vocab_size, tap=tap) as verifier,
        ):
            # Execute
            out = generate(
                specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=48), verifier, guard=guard,
                on_commit=on_commit,
            )  # fmt: skip
    finally:
        first.stop(grace=0)
        if second is not None:
            second.stop(grace=0)
    # Assert: resumed, the uninterrupted text (the address in it), the placeholder used.
    assert second is not None
    assert out.stats.fallback is None and out.stats.resumed == 1, out.fallback_detail
    assert out.text == TARGETS["email"]
    assert out.stats.extra.get("guard_placeholder", 0) >= 1
    # The resumed Open: the prompt again, and the text as the cloud saw it: a placeholder, no address.
    opens = [wire.decode_uplink(up) for up in tap_uplinks(tmp_path / "log") if _is_open(up)]
    assert len(opens) == 2 and opens[1].resume_ids
    resumed_text = smol_tok.decode(list(opens[1].resume_ids))
    assert EMAIL not in resumed_text and "janedoe" not in resumed_text
    assert any(p in resumed_text for p in PLACEHOLDERS.values()), resumed_text
    # Both verifiers' transcripts together witness the whole log.
    argv = ["verify", str(tmp_path / "log"), "--key", str(public), "--json"]
    for folder in transcripts:
        argv += ["--server-transcript", str(folder / "server-transcript.jsonl")]
    code = audit_main(argv)
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "VERIFIED", [m for c in report["checks"] for m in c["failures"]]


def test_the_recorder_blocks_a_resume_that_carries_what_never_went_up(tmp_path: Path) -> None:
    # Prepare: a session that sent a draft of [8, 9] and had both accepted.
    key = SigningKey.generate("device.test/alice")
    with AuditLog.open(tmp_path / "log", key) as log:
        recorder = EgressRecorder(log)
        params = SessionParams(top_k=3, draft_len=4)
        lost = recorder.begin_session(vocab_size=100)
        recorder.on_uplink(lost, wire.encode_open([5, 6], params))
        recorder.on_uplink(lost, wire.encode_round(1, [], [8, 9]))
        recorder.on_downlink(lost, wire.encode_downlink(1, _verdict(2)))
        recorder.on_fallback(lost, "verifier-lost")
        resumed = recorder.begin_session(vocab_size=100)
        # Execute / Assert: a token the lost session never sent (the span the guard held) is refused...
        with pytest.raises(EgressBlocked, match="resumes 3 token"):
            recorder.on_uplink(resumed, wire.encode_open([5, 6], params, [8, 9, 42]))
        # ...and so is the right text under another prompt; what went up, under the same prompt, passes.
        with pytest.raises(EgressBlocked, match="no earlier session of this log with the same prompt"):
            recorder.on_uplink(resumed, wire.encode_open([5, 7], params, [8, 9]))
        recorder.on_uplink(resumed, wire.encode_open([5, 6], params, [8, 9]))
        # A session that closed is over: nothing may resume it, even with the text it sent.
        recorder.on_uplink(resumed, wire.encode_round(1, [], [10, 11]))
        recorder.on_downlink(resumed, wire.encode_downlink(1, _verdict(2)))
        recorder.on_uplink(resumed, wire.encode_close(2))
        late = recorder.begin_session(vocab_size=100)
        with pytest.raises(EgressBlocked, match="resumes 4 token"):
            recorder.on_uplink(late, wire.encode_open([5, 6], params, [8, 9, 10, 11]))


def _verdict(accepted: int):
    from specsteer.core.session_types import SteeringVector, Verdict

    return Verdict(accepted, SteeringVector(((10,),), (0.0,)))


def _is_open(payload: bytes) -> bool:
    return isinstance(wire.decode_uplink(payload), wire.OpenFrame)


def tap_uplinks(log_dir: Path) -> list[bytes]:
    """Every uplink's bytes in the device's audit log, in order."""
    from specsteer.audit import records
    from specsteer.audit.log import scan_log

    out = []
    for stored in scan_log(log_dir).records:
        rec = records.parse(stored.data)
        if rec.kind == records.KIND_UPLINK and rec.payload is not None:
            out.append(rec.payload)
    return out
