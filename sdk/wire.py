"""The one module that touches the generated protobuf stubs: paired `*_to_proto` / `*_from_proto`.

`*_from_proto` functions parse at the boundary: they check every bound and raise `ProtocolError`
with a specific message, so nothing malformed reaches a session.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sdk.errors import ConfigError, ProtocolError
from sdk.proto import verifier_pb2 as pb
from sdk.session_types import (
    ALPHA_SCALE,
    GAMMA_SCALE,
    MAX_CANDIDATE_TOKENS,
    CandidatePolicy,
    Method,
    SessionParams,
    SteeringVector,
    Verdict,
)

_METHOD_TO_PB = {
    Method.SPECSTEER: pb.METHOD_SPECSTEER,
    Method.SD: pb.METHOD_SD,
    Method.FUSION: pb.METHOD_FUSION,
    Method.LLM: pb.METHOD_LLM,
}
_METHOD_FROM_PB = {v: k for k, v in _METHOD_TO_PB.items()}
_POLICY_TO_PB = {
    CandidatePolicy.GUARDRAIL: pb.CANDIDATE_POLICY_GUARDRAIL,
    CandidatePolicy.LITERAL: pb.CANDIDATE_POLICY_LITERAL,
}
_POLICY_FROM_PB = {v: k for k, v in _POLICY_TO_PB.items()}


def params_to_proto(params: SessionParams) -> pb.SessionParams:
    if params.method not in _METHOD_TO_PB:
        raise ConfigError(f"method {params.method.value} runs on the device only and opens no cloud session")
    infinite = math.isinf(params.gamma)
    return pb.SessionParams(
        method=_METHOD_TO_PB[params.method],
        sampling=params.sampling,
        gamma_ppm=0 if infinite else round(params.gamma * GAMMA_SCALE),
        gamma_infinite=infinite,
        alpha_milli=round(params.alpha * ALPHA_SCALE),
        top_k=params.top_k,
        draft_len=params.draft_len,
        policy=_POLICY_TO_PB[params.policy],
        bonus=params.bonus,
        adapter_version=params.adapter_version,
    )


def params_from_proto(msg: pb.SessionParams) -> SessionParams:
    if msg.method not in _METHOD_FROM_PB:
        raise ProtocolError(f"unknown method {msg.method}")
    if msg.policy not in _POLICY_FROM_PB:
        raise ProtocolError(f"unknown candidate policy {msg.policy}")
    if msg.gamma_infinite and msg.gamma_ppm:
        raise ProtocolError("gamma_infinite and a finite gamma_ppm are both set")
    try:
        return SessionParams(
            method=_METHOD_FROM_PB[msg.method],
            sampling=msg.sampling,
            gamma=math.inf if msg.gamma_infinite else msg.gamma_ppm / GAMMA_SCALE,
            alpha=msg.alpha_milli / ALPHA_SCALE,
            top_k=msg.top_k,
            draft_len=msg.draft_len,
            policy=_POLICY_FROM_PB[msg.policy],
            bonus=msg.bonus,
            adapter_version=msg.adapter_version,
        )
    except ConfigError as exc:
        raise ProtocolError(f"session parameters out of range: {exc}") from exc


def open_to_proto(prompt_ids: Sequence[int], params: SessionParams) -> pb.Uplink:
    return pb.Uplink(open=pb.Open(prompt_ids=list(prompt_ids), params=params_to_proto(params)))


def round_to_proto(seq: int, commit: Sequence[int], draft: Sequence[int]) -> pb.Uplink:
    return pb.Uplink(round=pb.Round(seq=seq, commit_ids=list(commit), draft_ids=list(draft)))


def close_to_proto(seq: int) -> pb.Uplink:
    return pb.Uplink(close=pb.Close(seq=seq))


def verdict_to_proto(seq: int, verdict: Verdict) -> pb.Downlink:
    msg = pb.Downlink(seq=seq, accepted=verdict.accepted)
    if verdict.steering is not None:
        for tokens, value in zip(verdict.steering.candidates, verdict.steering.values, strict=True):
            msg.candidates.add(token_ids=list(tokens), value=value)
    return msg


def verdict_from_proto(msg: pb.Downlink, *, max_top_k: int, vocab_size: int) -> Verdict:
    """Parse a downlink on the device: bounded top-k, finite values, token IDs in the vocabulary."""
    if len(msg.candidates) > max_top_k:
        raise ProtocolError(f"downlink carries {len(msg.candidates)} candidates, more than k = {max_top_k}")
    candidates: list[tuple[int, ...]] = []
    values: list[float] = []
    for i, cand in enumerate(msg.candidates):
        if not 1 <= len(cand.token_ids) <= MAX_CANDIDATE_TOKENS:
            raise ProtocolError(f"downlink candidate {i} has {len(cand.token_ids)} tokens")
        if any(t >= vocab_size for t in cand.token_ids):
            raise ProtocolError(f"downlink candidate {i} has a token ID outside the vocabulary")
        if not math.isfinite(cand.value):
            raise ProtocolError(f"downlink candidate {i} has a non-finite value")
        candidates.append(tuple(cand.token_ids))
        values.append(cand.value)
    steering = SteeringVector(tuple(candidates), tuple(values)) if candidates else None
    return Verdict(accepted=msg.accepted, steering=steering)
