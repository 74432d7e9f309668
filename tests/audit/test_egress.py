"""The egress choke point: what it logs, and what it refuses to let leave the device."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from specsteer.audit import records
from specsteer.audit.errors import AuditError, EgressBlocked
from specsteer.audit.log import AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import inspect, verify
from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import FusionVector, Method, SessionParams, SteeringVector, Verdict
from tests.audit.helpers import downlink_deserializer, uplink_serializer

VOCAB = 100


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[EgressRecorder]:
    log = AuditLog.open(tmp_path / "log", SigningKey.generate("d"))
    yield EgressRecorder(log)
    log.close()


def _opened(rec: EgressRecorder, *, top_k: int = 3, draft_len: int = 4) -> str:
    sid = rec.begin_session(vocab_size=VOCAB)
    uplink_serializer(rec, sid)(wire.open_to_proto([1, 2, 3], SessionParams(top_k=top_k, draft_len=draft_len)))
    return sid


def _payloads(rec: EgressRecorder, kind: str) -> list[bytes]:
    out = []
    for r in scan_log(rec.log.directory).records:
        parsed = records.parse(r.data)
        if parsed.kind == kind:
            out.append(base64.b64decode(parsed.fields["bytes"]))
    return out


def test_the_serializer_logs_exactly_the_bytes_it_returns(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    sent = uplink_serializer(rec, sid)(wire.round_to_proto(1, [], [4, 5]))
    assert _payloads(rec, records.KIND_UPLINK)[-1] == sent
    assert pb.Uplink.FromString(sent).round.draft_ids == [4, 5]
    assert sid not in sent.hex() and len(sid) == 32  # the session ID stays on the device


def _blocked(rec: EgressRecorder, sid: str, payload: bytes, match: str) -> None:
    size = rec.log.size
    with pytest.raises(EgressBlocked, match=match):
        rec.on_uplink(sid, payload)
    assert rec.log.size == size  # blocked means not logged, and so not sent


def test_an_unknown_field_is_blocked(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    payload = wire.round_to_proto(1, [], [4]).SerializeToString() + bytes([9 << 3 | 2, 3]) + b"hi!"
    _blocked(rec, sid, payload, r"unknown field.*Uplink field 9")


def test_an_unknown_field_inside_a_nested_message_is_blocked(rec: EgressRecorder) -> None:
    sid = rec.begin_session(vocab_size=VOCAB)
    params = wire.params_to_proto(SessionParams()).SerializeToString() + bytes([15 << 3, 1])
    open_ = pb.Open(prompt_ids=[1]).SerializeToString() + bytes([2 << 3 | 2, len(params)]) + params
    payload = bytes([1 << 3 | 2, len(open_)]) + open_
    _blocked(rec, sid, payload, r"Uplink\.open\.params field 15")


def test_a_non_canonical_encoding_is_blocked(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    # draft_ids [4, 5] unpacked (one tag per element): valid protobuf, but not what we serialize.
    round_ = bytes([1 << 3, 1, 3 << 3, 4, 3 << 3, 5])
    _blocked(rec, sid, bytes([2 << 3 | 2, len(round_)]) + round_, "not the deterministic serialization")


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (wire.round_to_proto(1, [], [VOCAB]), "outside the vocabulary"),
        (wire.round_to_proto(1, [], [1, 2, 3, 4, 5]), "more than the declared K = 4"),
        (wire.round_to_proto(2, [], [1]), "a gap"),
        (wire.round_to_proto(1, [7], [1]), "no steering candidates outstanding"),
        (wire.close_to_proto(5), "does not follow"),
        (pb.Uplink(), "carries no Open, Round or Close"),
        (wire.open_to_proto([1], SessionParams()), "a second Open"),
    ],
)
def test_contract_breaches_are_blocked(rec: EgressRecorder, message: pb.Uplink, match: str) -> None:
    _blocked(rec, _opened(rec), message.SerializeToString(), match)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (pb.SessionParams(method=pb.METHOD_UNSPECIFIED, top_k=1, draft_len=1), "unknown method"),
        (pb.SessionParams(method=pb.METHOD_SD, policy=1, top_k=1, draft_len=1, gamma_ppm=2_000_000_000), "gamma"),
        (pb.SessionParams(method=pb.METHOD_SD, policy=1, top_k=VOCAB + 1, draft_len=1), "exceeds the vocabulary"),
    ],
)
def test_undeclared_or_unbounded_parameters_are_blocked(
    rec: EgressRecorder, params: pb.SessionParams, match: str
) -> None:
    sid = rec.begin_session(vocab_size=VOCAB)
    _blocked(rec, sid, pb.Uplink(open=pb.Open(prompt_ids=[1], params=params)).SerializeToString(), match)


def test_a_commit_must_be_one_of_the_cloud_candidates(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    up, down = uplink_serializer(rec, sid), downlink_deserializer(rec, sid)
    up(wire.round_to_proto(1, [], [4]))
    down(wire.verdict_to_proto(1, Verdict(0, SteeringVector(((8,), (9, 10)), (0.0, -1.0)))).SerializeToString())
    _blocked(rec, sid, wire.round_to_proto(2, [11], [4]).SerializeToString(), "not one of the last downlink")
    up(wire.round_to_proto(2, [9, 10], [4]))


def test_nothing_leaves_after_close(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    uplink_serializer(rec, sid)(wire.close_to_proto(1))
    _blocked(rec, sid, wire.round_to_proto(1, [], [1]).SerializeToString(), "after the session closed")


def test_a_bad_downlink_is_logged_as_evidence_and_rejected(rec: EgressRecorder) -> None:
    sid = _opened(rec, top_k=3)
    uplink_serializer(rec, sid)(wire.round_to_proto(1, [], [4]))
    msg = pb.Downlink(seq=1, accepted=1)
    for i in range(4):
        msg.candidates.add(token_ids=[i], value=0.0)
    with pytest.raises(ProtocolError, match=r"4 candidates, above the session's k = 3"):
        downlink_deserializer(rec, sid)(msg.SerializeToString())
    assert _payloads(rec, records.KIND_DOWNLINK) == [msg.SerializeToString()]


def test_a_downlink_whose_bytes_carry_more_than_the_message_they_parse_to_is_rejected(rec: EgressRecorder) -> None:
    """A field repeated in the bytes parses to its last value: bytes in front of an honest top-k
    verdict could carry anything (a server smuggling data through the device's audit log)."""
    sid = _opened(rec)
    uplink_serializer(rec, sid)(wire.round_to_proto(1, [], [4]))
    honest = wire.encode_downlink(1, Verdict(1, SteeringVector(((5,), (6,)), (0.0, -1.0))))
    covert = b"".join(bytes([1 << 3, byte]) for byte in b"covert text")  # seq = <byte>, then the honest seq wins
    assert pb.Downlink.FromString(covert + honest) == pb.Downlink.FromString(honest)
    with pytest.raises(ProtocolError, match="not the deterministic serialization"):
        rec.on_downlink(sid, covert + honest)
    rec.log.close()
    report = inspect(rec.log.directory)
    downlinks = next(c for c in report.checks if c.name == "downlinks")
    assert not downlinks.ok and any("deterministic serialization" in f for f in downlinks.failures)


def test_a_non_finite_downlink_value_is_rejected(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    uplink_serializer(rec, sid)(wire.round_to_proto(1, [], [4]))
    msg = pb.Downlink(seq=1, accepted=0)
    msg.candidates.add(token_ids=[1], value=float("nan"))
    with pytest.raises(ProtocolError, match="non-finite"):
        rec.on_downlink(sid, msg.SerializeToString())


def test_device_local_records_hold_labels_never_text(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    with pytest.raises(AuditError, match="identifier"):
        rec.on_fallback(sid, "the user wrote: my card is 4111 1111")
    with pytest.raises(AuditError, match="placeholder"):
        rec.on_guard_decision(sid, decision="redact", count=1, placeholder="jane.doe@example.com")
    for label in ("<pw:Hunter2-Summer>", "<card:4111-1111-1111>"):  # a label's characters could spell it
        with pytest.raises(AuditError, match="placeholder"):
            rec.on_guard_decision(sid, decision="placeholder", count=1, placeholder=label)
    # An identifier of the device's choosing could spell the span out: a decision is one of a fixed few.
    with pytest.raises(AuditError, match="none of the decisions"):
        rec.on_guard_decision(sid, decision="jane-roe-ssn-078-05-1120", count=1, placeholder="[EMAIL]")
    with pytest.raises(AuditError, match="at most 8192"):
        rec.on_guard_decision(sid, decision="placeholder", count=2**53 - 1, placeholder="[EMAIL]")
    rec.on_guard_decision(sid, decision="redact", count=2, placeholder="[EMAIL]")
    rec.on_fallback(sid, "verifier-unreachable")
    rec.log.close()
    report = verify(rec.log.directory)
    assert [s.ended for s in report.sessions] == ["fallback (verifier-unreachable)"]


def test_a_session_must_be_begun_and_bounded(rec: EgressRecorder) -> None:
    with pytest.raises(AuditError, match="not begun"):
        uplink_serializer(rec, "0" * 32)
    with pytest.raises(AuditError, match="k cap"):
        rec.begin_session(vocab_size=10, max_top_k=65)
    # The declared size makes a uint32 a token ID: at 2^32 any 32-bit value (packed text) would pass.
    with pytest.raises(AuditError, match="vocabulary size must be in"):
        rec.begin_session(vocab_size=2**32)


def test_audit_verify_flags_free_text_in_device_local_records_and_an_unbounded_vocabulary(tmp_path: Path) -> None:
    """A log written around the recorder: a decision that is not a decision, a count no session can
    hold, and a vocabulary in which any 32-bit value counts as a token ID."""
    key = SigningKey.generate("d")
    with AuditLog.open(tmp_path / "log", key) as log:
        sid = EgressRecorder(log).begin_session(vocab_size=VOCAB)
        fields = {"decision": "jane-roe-ssn-078-05-1120", "count": 2**53 - 1, "placeholder": "[SSN]"}
        log.append_session(records.KIND_GUARD, sid, fields)
        log.append_session(records.KIND_BEGIN, "f" * 32, {"vocab_size": 2**32, "max_top_k": 8})
    report = inspect(tmp_path / "log", key=key.verifier)
    failures = [f for c in report.checks for f in c.failures]
    assert not report.ok
    assert any("'jane-roe-ssn-078-05-1120' is none of the decisions" in f for f in failures)
    assert any("counts 9007199254740991 spans" in f for f in failures)
    assert any("vocabulary of 4,294,967,296 tokens, above the protocol maximum" in f for f in failures)


def test_a_placeholder_on_the_wire_must_be_declared_by_a_guard_decision(rec: EgressRecorder) -> None:
    sid = _opened(rec)
    up = uplink_serializer(rec, sid)
    with pytest.raises(EgressBlocked, match="placeholder no guard decision declared"):
        up(wire.round_to_proto(1, [], [4], [7, 8]))
    rec.on_guard_decision(sid, decision="placeholder", count=1, placeholder="<EMAIL>")
    with pytest.raises(EgressBlocked, match="at most 16"):
        up(wire.round_to_proto(1, [], [4], [7] * 17))
    up(wire.round_to_proto(1, [], [4], [7, 8]))  # declared: it may go
    rec.on_downlink(sid, wire.encode_downlink(1, Verdict(1, SteeringVector(((5,),), (0.0,)))))
    with pytest.raises(EgressBlocked, match="no guard decision"):  # one declaration, one placeholder
        up(wire.round_to_proto(2, [5], [4], [9]))
    up(wire.round_to_proto(2, [5], [4]))
    rec.on_fallback(sid, "guard-keep-local")
    rec.log.close()
    report = verify(rec.log.directory)
    assert report.guard == (("placeholder", "<EMAIL>", 1),)
    assert "Egress guard: 1 span(s) acted on: placeholder <EMAIL> x1" in report.render()
    assert report.as_dict()["guard_decisions"] == [{"decision": "placeholder", "placeholder": "<EMAIL>", "count": 1}]


def test_audit_verify_flags_a_placeholder_no_decision_declared(tmp_path: Path) -> None:
    """A log written around the recorder (a tampered or buggy device) still fails verification."""
    key = SigningKey.generate("d")
    with AuditLog.open(tmp_path / "log", key) as log:
        sid = EgressRecorder(log).begin_session(vocab_size=VOCAB)
        for msg in (wire.open_to_proto([1, 2], SessionParams()), wire.round_to_proto(1, [], [4], [7, 8])):
            payload = msg.SerializeToString(deterministic=True)
            log.append_session(records.KIND_UPLINK, sid, records.payload_fields("up", payload))
        log.append_session(records.KIND_FALLBACK, sid, {"reason": "guard-keep-local"})
    report = inspect(tmp_path / "log", key=key.verifier)
    uplinks = next(c for c in report.checks if c.name == "uplinks")
    assert not report.ok and any("no guard decision declared" in f for f in uplinks.failures)


# -- fusion: a dense downlink bounded by the vocabulary, in fusion sessions only ---------------------


def _fusion_opened(rec: EgressRecorder) -> str:
    sid = rec.begin_session(vocab_size=VOCAB)
    uplink_serializer(rec, sid)(wire.open_to_proto([1, 2, 3], SessionParams(method=Method.FUSION, draft_len=0)))
    uplink_serializer(rec, sid)(wire.round_to_proto(1, [], []))
    return sid


def _dense(values: list[float]) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def test_a_fusion_session_takes_one_dense_vector_and_then_any_single_token(rec: EgressRecorder) -> None:
    sid = _fusion_opened(rec)
    down = wire.verdict_to_proto(1, Verdict(0, FusionVector(_dense([-float(i) for i in range(VOCAB)]))))
    verdict = downlink_deserializer(rec, sid)(down.SerializeToString())
    assert len(verdict.fusion.values) == 4 * VOCAB and not verdict.candidates
    # Any one token may be committed (the device fused over the whole vocabulary); two may not.
    _blocked(rec, sid, wire.round_to_proto(2, [41, 42], []).SerializeToString(), "not one of the last downlink")
    uplink_serializer(rec, sid)(wire.round_to_proto(2, [41], []))
    assert rec._sessions[sid].downlink_bytes == len(down.SerializeToString()) >= 4 * VOCAB


@pytest.mark.parametrize(
    ("fusion_session", "values", "candidates", "match"),
    [
        (False, [0.0] * VOCAB, False, "did not declare method fusion"),
        (True, [0.0] * (VOCAB - 1), False, f"needs {4 * VOCAB}"),
        (True, [0.0] * (VOCAB + 1), False, f"needs {4 * VOCAB}"),
        (True, [0.0] * (VOCAB - 1) + [float("inf")], False, "non-finite"),
        (True, [0.0] * VOCAB, True, "and top-k candidates"),
    ],
)
def test_a_dense_downlink_out_of_its_bounds_is_rejected(
    rec: EgressRecorder, fusion_session: bool, values: list[float], candidates: bool, match: str
) -> None:
    sid = _fusion_opened(rec) if fusion_session else _opened(rec)
    if not fusion_session:
        uplink_serializer(rec, sid)(wire.round_to_proto(1, [], [4]))
    msg = pb.Downlink(seq=1, accepted=0)
    msg.fusion.values = _dense(values)
    if candidates:
        msg.candidates.add(token_ids=[1], value=0.0)
    with pytest.raises(ProtocolError, match=match):
        downlink_deserializer(rec, sid)(msg.SerializeToString())
    # The device's own parser says the same.
    with pytest.raises(ProtocolError, match=match):
        wire.decode_downlink(msg.SerializeToString(), max_top_k=3, vocab_size=VOCAB, fusion=fusion_session)


def test_audit_verify_flags_a_dense_downlink_outside_a_fusion_session(tmp_path: Path) -> None:
    key = SigningKey.generate("d")
    with AuditLog.open(tmp_path / "log", key) as log:
        sid = EgressRecorder(log).begin_session(vocab_size=VOCAB)
        for msg in (wire.open_to_proto([1, 2], SessionParams()), wire.round_to_proto(1, [], [4])):
            payload = msg.SerializeToString(deterministic=True)
            log.append_session(records.KIND_UPLINK, sid, records.payload_fields("up", payload))
        down = wire.verdict_to_proto(1, Verdict(0, FusionVector(_dense([0.0] * VOCAB)))).SerializeToString()
        log.append_session(records.KIND_DOWNLINK, sid, records.payload_fields("down", down))
    report = inspect(tmp_path / "log", key=key.verifier)
    downlinks = next(c for c in report.checks if c.name == "downlinks")
    assert not report.ok and any("did not declare method fusion" in f for f in downlinks.failures)


def test_the_recorder_is_the_sdk_egress_tap_itself(rec: EgressRecorder) -> None:
    """Issue #46 (Build 8): `sdk.egress.RecorderTap` only renamed the recorder's `record_*` to the
    tap's `on_*`. The recorder now has the tap's methods, so the SDK's egress takes it as it is."""
    import specsteer.sdk.egress as egress

    # Prepare
    assert not hasattr(egress, "RecorderTap")
    session = egress.Egress(rec).begin(vocab_size=VOCAB, max_top_k=3)
    # Execute: every tap call the SDK makes, in a session's order.
    session.uplink(wire.encode_open([1, 2, 3], SessionParams(top_k=3, draft_len=4)))
    session.guard_decision("placeholder", 1, "<EMAIL>")
    session.uplink(wire.encode_round(1, [], [4], [7, 8]))
    session.downlink(wire.encode_downlink(1, Verdict(1, SteeringVector(((5,),), (0.0,)))))
    assert session.witness_request() is not None  # the recorder signs what a Close would carry
    session.fallback("verifier-lost")
    rec.log.close()
    # Assert: all of it is on record, and the log verifies.
    report = verify(rec.log.directory)
    assert report.guard == (("placeholder", "<EMAIL>", 1),)
    assert len(_payloads(rec, records.KIND_UPLINK)) == 2 and len(_payloads(rec, records.KIND_DOWNLINK)) == 1
