"""Decisions, as the pure functions of `core.steering` and the device's recovery make them.

Three files: the verifier's ratio test (`verify.json`, `core.steering.verify_ratios`), the
verifier's top-k steering vector (`candidates.json`, `core.steering.steering_candidates`), and what
the device does with a downlink (`recovery.json`): which drafted tokens it keeps and which token it
continues with, chosen by the SDK's own recovery (`sdk.decoding._recover`) over the log-probabilities
of the device's model given as inputs. Inputs and outputs of float32 computations are float32
values (exact in JSON); greedy choices only, since a sampled choice depends on the random generator.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from numpy.typing import NDArray

from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.recovery import device_rng, recovery_scores
from specsteer.core.session_types import ALPHA_SCALE, GAMMA_SCALE, CandidatePolicy, FusionVector, Method, SessionParams
from specsteer.core.steering import LOGP_FLOOR, acceptance_probability, log_gamma, steering_candidates
from specsteer.core.steering import verify_ratios as _verify_ratios
from specsteer.sdk.decoding import DecodeOptions, _recover
from tools.conformance.common import category, dec, enc, f32, f32s, mismatch, text_form

VERIFY_FILE = "steering/verify.json"
CANDIDATES_FILE = "steering/candidates.json"
RECOVERY_FILE = "steering/recovery.json"
VOCAB = 12


def _logps(probs: Sequence[float]) -> list[float]:
    """float32 log-probabilities of fixed probabilities (libm's log, then float32: the same on every machine)."""
    return [f32(math.log(p)) if p > 0 else -math.inf for p in probs]


def _gamma(ppm: int, infinite: bool) -> float:
    return math.inf if infinite else ppm / GAMMA_SCALE


# -- the ratio test ----------------------------------------------------------------------------------------


def verify_outcome(v: dict[str, Any]) -> dict[str, Any]:
    ratios = [dec(r) for r in v["log_ratios"]]
    gamma = _gamma(v["gamma_ppm"], v["gamma_infinite"])
    uniforms = None if v["uniforms"] is None else [float(u) for u in v["uniforms"]]
    out: dict[str, Any] = {
        "accepted": _verify_ratios(ratios, gamma, sampling=v["sampling"], uniforms=uniforms),
        "log_gamma": enc(log_gamma(gamma)),
    }
    if v["sampling"]:
        out["acceptance_probabilities"] = [enc(acceptance_probability(r, log_gamma(gamma))) for r in ratios]
    return out


def build_verify() -> dict[str, Any]:
    half = math.log(0.5)
    cases: list[tuple[str, str, list[float], int, bool, list[float] | None]] = [
        ("greedy-partial", "gamma 0.5: the third unit's ratio is below log 0.5", [0.1, -0.3, -0.9, 0.2], 500000,
         False, None),
        ("greedy-all", "gamma 0.5: every ratio above log 0.5", [0.0, -0.5, 1.2], 500000, False, None),
        ("greedy-strict", "a ratio exactly log gamma is rejected (P_G > gamma P_S^0 is strict)", [0.3, half], 500000,
         False, None),
        ("greedy-nan", "a 0/0 ratio (neither model allows the unit) is rejected", [0.0, math.nan, 0.0], 500000,
         False, None),
        ("gamma-zero", "gamma 0 accepts every unit with a finite ratio, never one P_G rules out", [-50.0, -math.inf],
         0, False, None),
        ("gamma-infinite", "gamma_infinite rejects every unit", [5.0, 5.0], 0, True, None),
        ("empty-draft", "no unit: nothing to accept", [], 500000, False, None),
        ("sampling", "sampling: accept unit i iff uniforms[i] < min(1, exp(ratio) / gamma)", [0.2, -0.4, -1.0],
         800000, False, [0.99, 0.5, 0.6]),
        ("sampling-reject-first", "sampling: the first unit's draw is above its acceptance probability",
         [-2.0, 0.0], 1000000, False, [0.2, 0.0]),
    ]  # fmt: skip
    vectors = []
    for name, description, ratios, ppm, infinite, uniforms in cases:
        v: dict[str, Any] = {
            "name": name, "description": description, "log_ratios": [enc(r) for r in ratios], "gamma_ppm": ppm,
            "gamma_infinite": infinite, "sampling": uniforms is not None, "uniforms": uniforms,
        }  # fmt: skip
        v["expected"] = verify_outcome(v)
        vectors.append(v)
    return {"kind": "ratio-test", "function": "specsteer.core.steering.verify_ratios", "vectors": vectors}


# -- the steering vector -----------------------------------------------------------------------------------


def candidates_outcome(v: dict[str, Any]) -> dict[str, Any]:
    logp_g = torch.tensor([dec(x) for x in v["logp_g"]], dtype=torch.float32)
    logp_s0 = None if v["logp_s0"] is None else torch.tensor([dec(x) for x in v["logp_s0"]], dtype=torch.float32)
    ids, values = steering_candidates(
        logp_g, logp_s0, alpha=v["alpha_milli"] / ALPHA_SCALE, k=v["top_k"], policy=CandidatePolicy(v["policy"])
    )
    return {"token_ids": [int(i) for i in ids], "values": f32s(values.tolist())}


def build_candidates() -> dict[str, Any]:
    g = _logps([0.30, 0.20, 0.15, 0.10, 0.08, 0.06, 0.04, 0.03, 0.02, 0.01, 0.007, 0.003])
    s0 = _logps([0.02, 0.25, 0.30, 0.01, 0.10, 0.12, 0.05, 0.05, 0.04, 0.03, 0.02, 0.01])
    tied = _logps([0.1, 0.2, 0.2, 0.1, 0.2, 0.05, 0.05, 0.025, 0.025, 0.02, 0.02, 0.01])
    zero_g = _logps([0.5, 0.0, 0.2, 0.1, 0.1, 0.05, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0])
    zero_s0 = _logps([0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    cases: list[tuple[str, str, list[float], list[float] | None, int, int, str]] = [
        ("guardrail", "the k most likely tokens under P_G, each with v = log P_G - alpha log P_S^0", g, s0, 1000, 3,
         "guardrail"),
        ("literal", "the same inputs: the k largest v", g, s0, 1000, 3, "literal"),
        ("alpha-half", "alpha 0.5, literal policy", g, s0, 500, 4, "literal"),
        ("alpha-zero", "alpha 0: v = log P_G, no P_S^0 needed", g, None, 0, 4, "guardrail"),
        ("ties", "equal log P_G: the lower token ID first", tied, s0, 1000, 4, "guardrail"),
        ("floor", f"probability 0 (log = -inf) enters v floored at log(float32 tiny) = {LOGP_FLOOR:.4f}", zero_g,
         zero_s0, 1000, 5, "literal"),
        ("whole-vocabulary", "k = the vocabulary: every token, ranked", g, s0, 2000, VOCAB, "guardrail"),
    ]  # fmt: skip
    vectors = []
    for name, description, lg, ls0, alpha_milli, k, policy in cases:
        v: dict[str, Any] = {
            "name": name, "description": description, "logp_g": [enc(x) for x in lg],
            "logp_s0": None if ls0 is None else [enc(x) for x in ls0], "alpha_milli": alpha_milli, "top_k": k,
            "policy": policy,
        }  # fmt: skip
        v["expected"] = candidates_outcome(v)
        vectors.append(v)
    return {"kind": "steering-vector", "function": "specsteer.core.steering.steering_candidates", "vectors": vectors}


# -- the device's recovery ---------------------------------------------------------------------------------


class _DeviceModel:
    """What the device's recovery reads of its own model (P_S^c): the next-token distribution and the
    log-probability of each candidate's whole token sequence, here given by the vector."""

    def __init__(self, next_logprobs: Sequence[float], continuations: dict[tuple[int, ...], float]) -> None:
        self._next = np.asarray(next_logprobs, dtype=np.float32)
        self._continuations = continuations

    def next_logprobs(self) -> NDArray[np.float32]:
        return self._next

    def score_continuations(self, candidates: Sequence[Sequence[int]]) -> NDArray[np.float32]:
        return np.asarray([self._continuations[tuple(c)] for c in candidates], dtype=np.float32)


def _params(p: dict[str, Any]) -> SessionParams:
    return SessionParams(
        method=Method(p["method"]), alpha=p["alpha_milli"] / ALPHA_SCALE, top_k=p["top_k"], draft_len=p["draft_len"],
        bonus=p["bonus"],
    )  # fmt: skip


def recovery_outcome(v: dict[str, Any]) -> dict[str, Any]:
    """What the device keeps of its draft and which tokens it continues with, given one downlink.

    The round's rule is sdk/decoding.py's loop (docs/algorithm.md): keep the accepted prefix; the text
    ends at an accepted end-of-sequence; otherwise recover after a rejection (or an empty draft) and,
    with the bonus on, after a full acceptance too (`sd` always); the choice is `_recover`'s.
    """
    params = _params(v["params"])
    raw = bytes.fromhex(v["downlink_hex"])
    draft = list(v["draft_ids"])
    try:
        _, verdict = wire.decode_downlink(
            raw, max_top_k=params.top_k, vocab_size=VOCAB, fusion=params.method is Method.FUSION
        )
    except ProtocolError as exc:
        return {"outcome": "refused", "category": category(str(exc)), "reason": str(exc)}
    if not 0 <= verdict.accepted <= len(draft):
        return {"outcome": "refused", "category": "accepted-over-draft", "reason": "more accepted than drafted"}
    kept = draft[: verdict.accepted]
    out: dict[str, Any] = {"outcome": "valid", "kept_ids": kept, "continue": "none", "commit_ids": None, "scores": None}
    rejected = verdict.accepted < len(draft) or not draft
    if v["eos_id"] in kept or not (rejected or params.bonus or params.method is Method.SD):
        return out
    if verdict.steering is None:
        why = "no steering candidates where a recovery is needed"
        return {"outcome": "refused", "category": "recovery-without-candidates", "reason": why}
    model = _DeviceModel(
        [dec(x) for x in v["logp_sc_next"]],
        {tuple(c["token_ids"]): dec(c["logp_sc"]) for c in v["logp_sc_candidates"]},
    )
    commit = _recover(cast(Any, model), verdict, params, DecodeOptions(), device_rng(0))
    out.update({"continue": "recovery" if rejected else "bonus", "commit_ids": list(commit)})
    if isinstance(verdict.steering, FusionVector):
        values = np.asarray(struct.unpack(f"<{verdict.steering.size}f", verdict.steering.values), dtype=np.float32)
        scores = recovery_scores(values, model.next_logprobs(), params.alpha)
    else:
        values = np.asarray(verdict.steering.values, dtype=np.float32)
        logp_sc = model.score_continuations(verdict.steering.candidates)
        scores = recovery_scores(values, logp_sc, params.alpha)
    out["scores"] = f32s(scores.tolist())
    return out


def _downlink(seq: int, accepted: int, cands: Sequence[tuple[tuple[int, ...], float]]) -> bytes:
    msg = pb.Downlink(seq=seq, accepted=accepted)
    for ids, value in cands:
        msg.candidates.add(token_ids=list(ids), value=value)
    return msg.SerializeToString(deterministic=True)


def build_recovery() -> dict[str, Any]:
    sc = _logps([0.05, 0.10, 0.02, 0.30, 0.08, 0.05, 0.04, 0.20, 0.06, 0.03, 0.04, 0.03])
    cands = [((3,), f32(-0.9)), ((7,), f32(-0.4)), ((1,), f32(0.1))]
    cross = [((3, 9), f32(0.5)), ((7,), f32(-0.2)), ((4, 5, 6), f32(0.4))]
    cross_sc = {(3, 9): f32(sc[3] + math.log(0.02)), (4, 5, 6): f32(sc[4] + math.log(0.5) + math.log(0.9))}
    fusion = [f32(-0.25 * (i % 5)) for i in range(VOCAB)]
    specsteer = {"method": "specsteer", "alpha_milli": 1000, "top_k": 4, "draft_len": 4, "bonus": True}
    cases: list[tuple[str, str, dict[str, Any], list[int], bytes, dict[tuple[int, ...], float]]] = [
        ("recovery", "one of three drafted tokens accepted: recover by argmax v + alpha log P_S^c", specsteer,
         [8, 2, 5], _downlink(1, 1, cands), {}),
        ("recovery-alpha-two", "alpha 2 weighs the device's model more", {**specsteer, "alpha_milli": 2000},
         [8, 2, 5], _downlink(1, 1, cands), {}),
        ("recovery-alpha-zero", "alpha 0: the largest v, whatever the device's model says",
         {**specsteer, "alpha_milli": 0}, [8, 2, 5], _downlink(1, 0, cands), {}),
        ("bonus", "every drafted token accepted: the bonus position is steered like a recovery", specsteer,
         [8, 2], _downlink(1, 2, cands), {}),
        ("no-bonus", "every drafted token accepted, bonus off: no token from the downlink",
         {**specsteer, "bonus": False}, [8, 2], _downlink(1, 2, cands), {}),
        ("single-candidate", "one candidate (sd's, or llm's token): taken as it is", {**specsteer, "method": "sd"},
         [8, 2, 5], _downlink(1, 0, [((10,), f32(0.0))]), {}),
        ("cross-vocabulary", "multi-token candidates scored by the log-probability of their whole sequence",
         specsteer, [8, 2], _downlink(1, 0, cross), cross_sc),
        ("end-of-sequence", "the accepted draft ends with end-of-sequence (ID 11): the text is over", specsteer,
         [8, 11], _downlink(1, 2, []), {}),
        ("fusion", "a dense fusion vector: argmax over the vocabulary of v + alpha log P_S^c",
         {"method": "fusion", "alpha_milli": 1000, "top_k": 1, "draft_len": 0, "bonus": True}, [],
         pb.Downlink(seq=1, fusion=pb.FusionVector(values=struct.pack(f"<{VOCAB}f", *fusion))).SerializeToString(
             deterministic=True), {}),
        ("accepted-over-draft", "a downlink accepting more tokens than were drafted is refused", specsteer, [8],
         _downlink(1, 2, cands), {}),
        ("recovery-without-candidates", "a rejected draft and no candidate to recover with is refused", specsteer,
         [8, 2], _downlink(1, 1, []), {}),
    ]  # fmt: skip
    vectors = []
    for name, description, params, draft, raw, multi in cases:
        steering = pb.Downlink.FromString(raw).candidates
        per_candidate = [
            {"token_ids": list(c.token_ids), "logp_sc": enc(multi.get(tuple(c.token_ids), sc[c.token_ids[0]]))}
            for c in steering
        ]
        v: dict[str, Any] = {
            "name": name, "description": description, "params": params, "eos_id": 11, "draft_ids": draft,
            "downlink_hex": raw.hex(), "downlink_text": text_form(pb.Downlink.FromString(raw)),
            "logp_sc_next": [enc(x) for x in sc], "logp_sc_candidates": per_candidate,
        }  # fmt: skip
        v["expected"] = recovery_outcome(v)
        v["expected"].pop("reason", None)  # the SDK's sentence, not part of the contract
        vectors.append(v)
    return {"kind": "device-recovery", "function": "specsteer.sdk.decoding._recover", "vectors": vectors}


# -- check -------------------------------------------------------------------------------------------------


def _replay(file: str, doc: dict[str, Any], outcome: Any) -> list[str]:
    problems = []
    for v in doc["vectors"]:
        got = outcome(v)
        reason = got.pop("reason", None) if isinstance(got, dict) else None
        if got != v["expected"]:
            why = f" (the SDK says: {reason})" if reason else ""
            problems.append(mismatch(file, v["name"], "decision", v["expected"], got) + why)
    return problems


def check_verify(doc: dict[str, Any]) -> list[str]:
    return _replay(VERIFY_FILE, doc, verify_outcome)


def check_candidates(doc: dict[str, Any]) -> list[str]:
    return _replay(CANDIDATES_FILE, doc, candidates_outcome)


def check_recovery(doc: dict[str, Any]) -> list[str]:
    return _replay(RECOVERY_FILE, doc, recovery_outcome)
