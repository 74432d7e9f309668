"""Single frames, as a receiver decodes them: uplinks as the verifier checks them on arrival,
downlinks as the device checks them before it acts on them.

Each vector is a frame's exact bytes and what its receiver must decide: `valid` with the decoded
content, or `refused` with the rule it breaks (a category of `common.CATEGORIES`). The outcome is
what `core.wire.decode_uplink` (plus the prompt-length limit the verifier applies to an Open) and
`core.wire.decode_downlink` decide; session order is `sessions.py`'s.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.limits import MAX_PROMPT_TOKENS, prompt_length_problem
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams, SteeringVector, Verdict
from tools.conformance import witness_frames
from tools.conformance.common import ConformanceError, category, enc, f32, field_bytes, mismatch, text_form, varint

UPLINK_FILE = "wire/uplinks.json"
DOWNLINK_FILE = "wire/downlinks.json"
VOCAB = 32  # the receiver's (Specialist) vocabulary in every frame vector: small, so IDs stay one byte
MAX_TOP_K = 4  # the k the device accepts in the downlink vectors


def params_json(params: SessionParams) -> dict[str, Any]:
    """Session parameters in their wire units (the Open's SessionParams fields)."""
    msg = wire.params_to_proto(params)
    return {
        "method": pb.Method.Name(msg.method),
        "sampling": msg.sampling,
        "gamma_ppm": msg.gamma_ppm,
        "gamma_infinite": msg.gamma_infinite,
        "alpha_milli": msg.alpha_milli,
        "top_k": msg.top_k,
        "draft_len": msg.draft_len,
        "policy": pb.CandidatePolicy.Name(msg.policy),
        "bonus": msg.bonus,
        "adapter_version": msg.adapter_version,
        "padded_frames": msg.padded_frames,
    }


def _uplink_frame(frame: wire.UplinkFrame) -> dict[str, Any]:
    if isinstance(frame, wire.OpenFrame):
        return {"kind": "open", "prompt_ids": list(frame.prompt_ids), "params": params_json(frame.params)}
    if isinstance(frame, wire.RoundFrame):
        return {
            "kind": "padded_round" if frame.slots is not None else "round",
            "seq": frame.seq,
            "commit_ids": list(frame.commit),
            "draft_ids": list(frame.draft),
            "literal_ids": list(frame.literal),
            "slots": None if frame.slots is None else list(frame.slots),
        }
    if frame.witness is None:  # a Close without a witness request states no "witness" (as before it existed)
        return {"kind": "close", "seq": frame.seq}
    return {"kind": "close", "seq": frame.seq, "witness": witness_frames.witness_json(frame.witness)}


def uplink_outcome(raw: bytes, vocab_size: int) -> tuple[dict[str, Any], str | None]:
    """What the verifier decides on receiving `raw`, and the SDK's own sentence if it refuses."""
    try:
        frame = wire.decode_uplink(raw, vocab_size=vocab_size)
        if isinstance(frame, wire.OpenFrame):
            problem = prompt_length_problem(len(frame.prompt_ids))
            if problem is not None:
                raise ProtocolError(problem)
    except ProtocolError as exc:
        return {"outcome": "refused", "category": category(str(exc))}, str(exc)
    return {"outcome": "valid", "frame": _uplink_frame(frame)}, None


def _downlink_json(seq: int, verdict: Verdict) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": seq, "accepted": verdict.accepted, "candidates": [], "fusion_values": None}
    if isinstance(verdict.steering, SteeringVector):
        out["candidates"] = [
            {"token_ids": list(t), "value": enc(v)}
            for t, v in zip(verdict.steering.candidates, verdict.steering.values, strict=True)
        ]
    elif verdict.steering is not None:
        values = struct.unpack(f"<{verdict.steering.size}f", verdict.steering.values)
        out["fusion_values"] = [enc(v) for v in values]
    return out


def downlink_outcome(raw: bytes, vocab_size: int, max_top_k: int, fusion: bool) -> tuple[dict[str, Any], str | None]:
    """What the device decides on receiving `raw`, and the SDK's own sentence if it refuses."""
    try:
        seq, verdict = wire.decode_downlink(raw, max_top_k=max_top_k, vocab_size=vocab_size, fusion=fusion)
    except ProtocolError as exc:
        return {"outcome": "refused", "category": category(str(exc))}, str(exc)
    return {"outcome": "valid", "downlink": _downlink_json(seq, verdict)}, None


def _text(raw: bytes, message: type[pb.Uplink] | type[pb.Downlink]) -> str | None:
    try:
        return text_form(message.FromString(raw))
    except DecodeError:  # bytes that do not parse have no text form
        return None


# -- the uplink vectors ------------------------------------------------------------------------------------


def _uplinks() -> list[tuple[str, str, bytes, str]]:
    """(name, description, frame bytes, intended outcome: "valid" or a category)."""
    enc_round = wire.encode_round
    plain = SessionParams(top_k=4, draft_len=4)
    round_1 = enc_round(1, (), (5, 6, 7))
    inner_round = pb.Round(seq=1, draft_ids=[5, 6]).SerializeToString(deterministic=True)
    unpacked = varint(1 << 3) + varint(1) + b"".join(varint(3 << 3) + varint(t) for t in (5, 6))
    return [
        ("open", "an Open: prompt token IDs and the default SpecSteer parameters", wire.encode_open((1, 2, 3), plain),
         "valid"),
        ("open-padded-sampling", "an Open declaring padded frames, sampling, gamma 0.25, alpha 0.5, literal policy",
         wire.encode_open((4, 5), SessionParams(sampling=True, gamma=0.25, alpha=0.5, top_k=8, draft_len=6,
                                                policy=CandidatePolicy.LITERAL, padded_frames=True)), "valid"),
        ("open-gamma-infinite", "an Open with gamma = inf (every draft rejected) and no bonus token",
         wire.encode_open((1,), SessionParams(gamma=math.inf, bonus=False, adapter_version=3)), "valid"),
        ("open-fusion", "an Open for token-level fusion (K = 0)",
         wire.encode_open((1, 2), SessionParams(method=Method.FUSION, draft_len=0, top_k=1)), "valid"),
        ("round-first", "round 1: no commit, a three-token draft", round_1, "valid"),
        ("round-commit-placeholder", "a round committing a recovery token, with a guard placeholder and a draft",
         enc_round(2, (9,), (4,), (20, 21)), "valid"),
        ("round-empty", "a round with neither commit nor draft", enc_round(3, (), ()), "valid"),
        ("padded-round", "a PaddedRound of a K = 4 session: 8 commit, 4 draft and 16 placeholder slots",
         enc_round(1, (), (5, 6), pad_to=4), "valid"),
        ("padded-round-commit", "a PaddedRound with a two-token commit (a cross-vocabulary candidate)",
         enc_round(2, (7, 8), (5, 6, 7, 8), pad_to=4), "valid"),
        ("close", "a Close after two rounds", wire.encode_close(3), "valid"),
        ("not-protobuf", "bytes that are no protobuf message (a length running past the end)", b"\x12\x05\x08",
         "not-protobuf"),
        ("empty", "zero bytes: an Uplink with no Open, Round, PaddedRound or Close", b"", "no-kind"),
        ("unknown-top-field", "a Close followed by field 9, which Uplink does not declare",
         wire.encode_close(1) + varint(9 << 3) + varint(1), "unknown-field"),
        ("unknown-nested-field", "a Round carrying field 7, which Round does not declare",
         field_bytes(2, inner_round + varint(7 << 3) + varint(1)), "unknown-field"),
        ("non-canonical-varint", "round 1 whose seq is written in two varint bytes (0x81 0x00) instead of one",
         field_bytes(2, b"\x08\x81\x00" + inner_round[2:]), "non-canonical"),
        ("non-canonical-unpacked", "a Round whose draft IDs are unpacked, one tag each, instead of packed",
         field_bytes(2, unpacked), "non-canonical"),
        ("prompt-out-of-vocabulary", f"an Open with prompt token {VOCAB} in a vocabulary of {VOCAB}",
         wire.encode_open((1, VOCAB), plain), "out-of-vocabulary"),
        ("draft-out-of-vocabulary", "a Round drafting token 40", enc_round(1, (), (5, 40)), "out-of-vocabulary"),
        ("commit-out-of-vocabulary", "a Round committing token 99", enc_round(2, (99,), (5,)), "out-of-vocabulary"),
        ("placeholder-out-of-vocabulary", "a Round whose placeholder holds token 33",
         enc_round(2, (), (5,), (33,)), "out-of-vocabulary"),
        ("negative-draft-id", "a Round drafting -1 as a ten-byte varint: it parses as 4294967295",
         field_bytes(2, varint(1 << 3) + varint(1) + field_bytes(3, varint(2**64 - 1))), "out-of-vocabulary"),
        ("padded-out-of-vocabulary", "a PaddedRound drafting token 50", enc_round(1, (), (50,), pad_to=4),
         "out-of-vocabulary"),
        ("padded-token-after-padding", "a PaddedRound whose draft slots hold a token after a pad",
         pb.Uplink(padded_round=pb.PaddedRound(seq=1, commit_ids=[wire.PAD_ID] * 8,
                                               draft_ids=[5, wire.PAD_ID, 6, wire.PAD_ID],
                                               literal_ids=[wire.PAD_ID] * 16)).SerializeToString(deterministic=True),
         "token-after-padding"),
        ("params-gamma-both", "an Open setting both gamma_infinite and a finite gamma_ppm",
         pb.Uplink(open=pb.Open(prompt_ids=[1], params=pb.SessionParams(
             method=pb.METHOD_SPECSTEER, gamma_ppm=500000, gamma_infinite=True, alpha_milli=1000, top_k=4,
             draft_len=4, policy=pb.CANDIDATE_POLICY_GUARDRAIL))).SerializeToString(deterministic=True),
         "params-out-of-range"),
        ("params-method-unspecified", "an Open whose method is METHOD_UNSPECIFIED",
         pb.Uplink(open=pb.Open(prompt_ids=[1], params=pb.SessionParams(
             top_k=4, draft_len=4, policy=pb.CANDIDATE_POLICY_GUARDRAIL))).SerializeToString(deterministic=True),
         "params-out-of-range"),
        ("params-draft-too-long", "an Open declaring K = 33 (at most 32)",
         pb.Uplink(open=pb.Open(prompt_ids=[1], params=pb.SessionParams(
             method=pb.METHOD_SPECSTEER, gamma_ppm=500000, alpha_milli=1000, top_k=4, draft_len=33,
             policy=pb.CANDIDATE_POLICY_GUARDRAIL))).SerializeToString(deterministic=True),
         "params-out-of-range"),
        ("params-alpha-too-large", "an Open declaring alpha = 10.001 (at most 10)",
         pb.Uplink(open=pb.Open(prompt_ids=[1], params=pb.SessionParams(
             method=pb.METHOD_SPECSTEER, gamma_ppm=500000, alpha_milli=10001, top_k=4, draft_len=4,
             policy=pb.CANDIDATE_POLICY_GUARDRAIL))).SerializeToString(deterministic=True),
         "params-out-of-range"),
        ("prompt-too-long", f"an Open of {MAX_PROMPT_TOKENS + 1} prompt tokens (at most {MAX_PROMPT_TOKENS})",
         wire.encode_open([1] * (MAX_PROMPT_TOKENS + 1), plain), "prompt-too-long"),
    ]  # fmt: skip


# -- the downlink vectors ----------------------------------------------------------------------------------


def _candidates(*cands: tuple[tuple[int, ...], float]) -> pb.Downlink:
    msg = pb.Downlink()
    for ids, value in cands:
        msg.candidates.add(token_ids=list(ids), value=value)
    return msg


def _down(seq: int, accepted: int, *cands: tuple[tuple[int, ...], float]) -> bytes:
    msg = _candidates(*cands)
    msg.seq, msg.accepted = seq, accepted
    return msg.SerializeToString(deterministic=True)


def _fusion(seq: int, values: list[float], *, with_candidate: bool = False) -> bytes:
    msg = pb.Downlink(seq=seq, accepted=0, fusion=pb.FusionVector(values=struct.pack(f"<{len(values)}f", *values)))
    if with_candidate:
        msg.candidates.add(token_ids=[1], value=0.5)
    return msg.SerializeToString(deterministic=True)


def _downlinks() -> list[tuple[str, str, bytes, bool, str]]:
    """(name, description, frame bytes, the session declared fusion, intended outcome)."""
    three = (((3,), f32(-0.25)), ((7,), f32(-1.5)), ((11,), f32(-2.75)))
    fusion_values = [f32(-0.125 * i) for i in range(VOCAB)]
    return [
        ("candidates", "one of three drafted tokens accepted; three steering candidates",
         _down(1, 1, *three), False, "valid"),
        ("cross-vocabulary-candidate", "a candidate of three Specialist tokens (a Generalist token's string)",
         _down(2, 0, ((4, 5, 6), f32(0.75)), ((9,), f32(-0.5))), False, "valid"),
        ("all-accepted-bonus", "every drafted token accepted, with candidates for the bonus position",
         _down(3, 4, ((2,), f32(1.0))), False, "valid"),
        ("end-of-sequence", "accepted, no candidates: the accepted draft ended the text", _down(4, 2), False,
         "valid"),
        ("fusion", f"a dense fusion vector of {VOCAB} float32 values in a fusion session",
         _fusion(1, fusion_values), True, "valid"),
        ("not-protobuf", "bytes that are no protobuf message", b"\x1a\x09\x0a", False, "not-protobuf"),
        ("unknown-field", "a downlink carrying field 15, which Downlink does not declare",
         _down(1, 0, ((3,), 0.5)) + varint(15 << 3) + varint(1), False, "unknown-field"),
        ("too-many-candidates", f"{MAX_TOP_K + 1} candidates where the device accepts k = {MAX_TOP_K}",
         _down(1, 0, *[((i,), -float(i)) for i in range(MAX_TOP_K + 1)]), False, "too-many-candidates"),
        ("empty-candidate", "a candidate with no token", _down(1, 0, ((), 0.5)), False, "candidate-length"),
        ("candidate-too-long", "a candidate of nine tokens (at most eight)",
         _down(1, 0, (tuple(range(1, 10)), 0.5)), False, "candidate-length"),
        ("candidate-out-of-vocabulary", f"a candidate token {VOCAB} in a vocabulary of {VOCAB}",
         _down(1, 0, ((VOCAB,), 0.5)), False, "out-of-vocabulary"),
        ("candidate-nan", "a candidate whose value is NaN", _down(1, 0, ((3,), 0.5), ((4,), math.nan)), False,
         "non-finite-value"),
        ("candidate-infinite", "a candidate whose value is +inf", _down(1, 0, ((3,), math.inf)), False,
         "non-finite-value"),
        ("fusion-undeclared", "a dense fusion vector in a session that did not declare fusion",
         _fusion(1, fusion_values), False, "fusion-undeclared"),
        ("fusion-short", f"a fusion vector of {VOCAB - 1} values for a vocabulary of {VOCAB}",
         _fusion(1, fusion_values[:-1]), True, "fusion-size"),
        ("fusion-nan", "a fusion vector holding a NaN", _fusion(1, [*fusion_values[:-1], math.nan]), True,
         "non-finite-value"),
        ("fusion-with-candidates", "a fusion vector beside a top-k candidate", _fusion(1, fusion_values,
         with_candidate=True), True, "fusion-with-candidates"),
    ]  # fmt: skip


# -- write and check ---------------------------------------------------------------------------------------


def _intended(name: str, outcome: dict[str, Any], intent: str, message: str | None) -> None:
    got = outcome.get("category", "valid")
    if got != intent:
        raise ConformanceError(f"vector {name!r} was written to be {intent}, but the SDK says {got} ({message})")


def build_uplinks() -> dict[str, Any]:
    vectors = []
    for name, description, raw, intent in _uplinks() + witness_frames.uplinks():
        outcome, message = uplink_outcome(raw, VOCAB)
        _intended(name, outcome, intent, message)
        vectors.append(
            {"name": name, "description": description, "vocab_size": VOCAB, "frame_hex": raw.hex(),
             "frame_text": _text(raw, pb.Uplink), "expected": outcome}
        )  # fmt: skip
    return {"kind": "uplink-frames", "receiver": "the verifier, on arrival", "vectors": vectors}


def build_downlinks() -> dict[str, Any]:
    vectors = []
    for name, description, raw, fusion, intent in _downlinks() + witness_frames.downlinks():
        outcome, message = downlink_outcome(raw, VOCAB, MAX_TOP_K, fusion)
        _intended(name, outcome, intent, message)
        vectors.append(
            {"name": name, "description": description, "vocab_size": VOCAB, "max_top_k": MAX_TOP_K,
             "fusion": fusion, "frame_hex": raw.hex(), "frame_text": _text(raw, pb.Downlink), "expected": outcome}
        )  # fmt: skip
    return {"kind": "downlink-frames", "receiver": "the device, before acting on it", "vectors": vectors}


def _replay(
    file: str, doc: dict[str, Any], decide: Callable[[dict[str, Any], bytes], tuple[dict[str, Any], str | None]]
) -> list[str]:
    problems = []
    for v in doc["vectors"]:
        got, message = decide(v, bytes.fromhex(v["frame_hex"]))
        if got != v["expected"]:
            why = f" (the SDK says: {message})" if message else ""
            problems.append(mismatch(file, v["name"], "outcome", v["expected"], got) + why)
    return problems


def check_uplinks(doc: dict[str, Any]) -> list[str]:
    return _replay(UPLINK_FILE, doc, lambda v, raw: uplink_outcome(raw, v["vocab_size"]))


def check_downlinks(doc: dict[str, Any]) -> list[str]:
    return _replay(
        DOWNLINK_FILE, doc, lambda v, raw: downlink_outcome(raw, v["vocab_size"], v["max_top_k"], v["fusion"])
    )
