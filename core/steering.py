"""SpecSteer's decision rules, as pure functions. This is where acceptance is decided.

Everything here follows `docs/algorithm.md`: no I/O, no models, no globals, randomness
passed in. The cloud (`server/session.py`) calls it on torch tensors; the device's own rules
(recovery, the draw of each token) are `core.recovery`, in numpy, so the device needs no torch.
Log-probabilities are fp32 log-softmax values.

- `verify_ratios`: SpecSteer's ratio test, greedy or sampling (per token or per segment).
- `verify_exact_greedy`: standard speculative decoding's greedy rule (the `sd` baseline).
- `steering_candidates` / `steering_values`: the top-k steering vector (guardrail or literal policy).
- `align_segments`: cross-vocabulary verification units from two tokenizations of one text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.recovery import LOGP_FLOOR
from core.session_types import CandidatePolicy

__all__ = [
    "LOGP_FLOOR",
    "Segment",
    "acceptance_probability",
    "align_segments",
    "floored",
    "log_gamma",
    "log_softmax",
    "steering_candidates",
    "steering_values",
    "top_indices",
    "verify_exact_greedy",
    "verify_ratios",
]


def floored(logp: torch.Tensor) -> torch.Tensor:
    """fp32 log-probabilities with -inf and NaN raised to `LOGP_FLOOR` (`core.recovery` says why),
    the floor the device's recovery scores use too."""
    return torch.nan_to_num(logp.float(), nan=LOGP_FLOOR, neginf=LOGP_FLOOR).clamp_min(LOGP_FLOOR)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax over the last axis, whatever the model's dtype."""
    return torch.log_softmax(logits.float(), dim=-1)


def log_gamma(gamma: float) -> float:
    """log(gamma) with gamma = 0 -> -inf (accept all) and gamma = inf -> +inf (reject all)."""
    if gamma == 0:
        return -math.inf
    return math.log(gamma)


def verify_ratios(
    log_ratios: Sequence[float],
    gamma: float,
    *,
    sampling: bool,
    uniforms: Sequence[float] | None = None,
) -> int:
    """How many leading units (tokens, or cross-vocabulary segments) pass the ratio test.

    A unit's log ratio is log P_G - log P_S^0 of its tokens. Greedy: accept iff
    P_G > gamma * P_S^0 (strict). Sampling: accept with probability min(1, P_G / (gamma * P_S^0)),
    i.e. iff u < that, with `uniforms[i]` ~ U[0, 1) drawn by the caller. Stops at the first rejection.
    """
    threshold = log_gamma(gamma)
    if sampling and (uniforms is None or len(uniforms) < len(log_ratios)):
        raise ValueError("sampling mode needs one uniform draw per unit")
    for i, ratio in enumerate(log_ratios):
        if math.isnan(ratio):
            return i  # 0/0: neither model allows it
        if sampling:
            assert uniforms is not None
            if not uniforms[i] < acceptance_probability(ratio, threshold):
                return i
        elif not ratio > threshold:
            return i
    return len(log_ratios)


def acceptance_probability(log_ratio: float, log_gamma_value: float) -> float:
    """min(1, exp(log_ratio) / gamma), without overflow; 1 when gamma = 0, 0 when gamma = inf."""
    excess = log_ratio - log_gamma_value
    if math.isnan(excess):
        return 0.0 if log_gamma_value == math.inf else 1.0
    return 1.0 if excess >= 0 else math.exp(excess)


def verify_exact_greedy(matches: Sequence[bool]) -> int:
    """Standard speculative decoding, greedy: accept units while each is the target's greedy
    choice (`matches[i]`: unit i's tokens are the argmax of P_G at their positions)."""
    for i, match in enumerate(matches):
        if not match:
            return i
    return len(matches)


def steering_values(logp_g: torch.Tensor, logp_s0: torch.Tensor, alpha: float) -> torch.Tensor:
    """v(y) = log P_G(y) - alpha * log P_S^0(y), both floored at `LOGP_FLOOR`, so always finite."""
    if alpha == 0:
        return floored(logp_g)
    return floored(logp_g) - alpha * floored(logp_s0)


def top_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest entries, best first; ties broken by the lower index so runs are reproducible.

    Over a whole vocabulary a full stable sort costs tens of ms a call on a CPU (it ran every
    token); `topk` finds the k-th value in linear time, and only the entries at or above it (every
    tie included, in index order) are stably sorted, which gives exactly the full sort's first k.
    """
    k = min(k, scores.shape[-1])
    if scores.dim() != 1 or k == scores.shape[0] or k == 0 or bool(torch.isnan(scores).any()):
        return torch.sort(scores, descending=True, stable=True).indices[..., :k]
    threshold = torch.topk(scores, k, sorted=False).values.min()
    pool = torch.nonzero(scores >= threshold).squeeze(-1)  # ascending indices
    order = torch.sort(scores[pool], descending=True, stable=True).indices
    return pool[order][:k]


def steering_candidates(
    logp_g: torch.Tensor,
    logp_s0: torch.Tensor | None,
    *,
    alpha: float,
    k: int,
    policy: CandidatePolicy,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same-vocabulary top-k steering vector at one position: (candidate token IDs, values).

    GUARDRAIL (default): the k most likely tokens under P_G, so the set never fills with tokens
    both models find implausible. LITERAL: the paper's k largest v(y). `logp_s0` may be None
    only when alpha == 0 (v is then log P_G and both policies coincide).
    """
    if logp_s0 is None:
        if alpha != 0:
            raise ValueError("P_S^0 is needed when alpha != 0")
        values = floored(logp_g)
    else:
        values = steering_values(logp_g, logp_s0, alpha)
    ranked_by = logp_g if policy is CandidatePolicy.GUARDRAIL else values
    ids = top_indices(ranked_by, k)
    return ids, values[ids]


@dataclass(frozen=True)
class Segment:
    """One cross-vocabulary verification unit: Specialist draft tokens [s_start, s_stop) and
    Generalist tokens [g_start, g_stop) of the re-tokenized tail, covering the same text."""

    s_start: int
    s_stop: int
    g_start: int
    g_stop: int
    end: int  # character offset where the segment ends


def align_segments(
    s_ends: Sequence[int | None],
    g_ends: Sequence[float],
    commit_end: int,
) -> list[Segment]:
    """Cut a draft into segments at the boundaries both tokenizations share.

    `s_ends[i]` is where draft token i ends in the text (None where it ends inside a character,
    which is never a boundary). `g_ends` are the non-decreasing end offsets of the Generalist's
    tokens of the re-tokenized tail (a half offset for a token ending inside a character, so it
    is ordered but never shared), which may start before `commit_end` (where the draft starts). A
    Generalist token that spans `commit_end` belongs to the first segment. Draft tokens after the
    last shared boundary form no segment, so they can never be accepted.
    """
    g_set = set(g_ends)
    segments: list[Segment] = []
    s_start, prev_end = 0, commit_end
    g_cursor = 0
    while g_cursor < len(g_ends) and g_ends[g_cursor] <= commit_end:
        g_cursor += 1
    for i, end in enumerate(s_ends):
        if end is None or end <= prev_end or end not in g_set:
            continue
        g_stop = g_cursor
        while g_stop < len(g_ends) and g_ends[g_stop] <= end:
            g_stop += 1
        segments.append(Segment(s_start, i + 1, g_cursor, g_stop, end))
        s_start, prev_end, g_cursor = i + 1, end, g_stop
    return segments
