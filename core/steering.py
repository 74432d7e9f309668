"""SpecSteer's decision rules, as pure functions. This is where acceptance is decided.

Everything here follows `docs/algorithm.md`: no I/O, no models, no globals, randomness
passed in. The cloud (`server/session.py`) calls it on torch tensors; the device's own rules
(recovery, the draw of each token) are `core.recovery`, in numpy, so the device needs no torch.
Log-probabilities are fp32 log-softmax values.

- `verify_ratios`: SpecSteer's ratio test, greedy or sampling (per token or per segment).
- `gated_gammas`: each unit's gamma under the certainty gate (an extension of the paper's rule).
- `is_form_text` / `form_gammas`: the form rule, a lower gamma for drafts of layout and
  punctuation only (another extension).
- `verify_exact_greedy`: standard speculative decoding's greedy rule (the `sd` baseline).
- `steering_candidates` / `steering_values`: the top-k steering vector (guardrail or literal policy).
- `align_segments`: cross-vocabulary verification units from two tokenizations of one text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specsteer.core.errors import ModelLoadError
from specsteer.core.recovery import LOGP_FLOOR, RULED_OUT
from specsteer.core.session_types import CandidatePolicy

__all__ = [
    "LOGP_FLOOR",
    "RULED_OUT",
    "Segment",
    "acceptance_probability",
    "align_segments",
    "floored",
    "form_gammas",
    "gated_gammas",
    "is_form_text",
    "log_gamma",
    "log_softmax",
    "refuse_nan",
    "steering_candidates",
    "steering_values",
    "top_indices",
    "verify_exact_greedy",
    "verify_ratios",
]


def floored(logp: torch.Tensor) -> torch.Tensor:
    """fp32 log-probabilities with -inf (probability 0) replaced by `LOGP_FLOOR`, finite values
    unchanged: the convention the device's recovery scores use too (`core.recovery` says why)."""
    x = logp.float()
    return torch.where(torch.isneginf(x), torch.full_like(x, LOGP_FLOOR), x)


def refuse_nan(*rows: torch.Tensor | None) -> None:
    """Raise `ModelLoadError` if a row holds a NaN (a broken model's logits): ranked, a NaN row
    made the candidates token IDs 0..k-1 and rejected every draft, silently."""
    present = [r for r in rows if r is not None]
    if present and bool(torch.stack([torch.isnan(r).any() for r in present]).any()):  # one host sync
        raise ModelLoadError(
            "a cloud model's log-probabilities hold NaN (its logits are not numbers: damaged weights, or an "
            "overflow in its dtype); no token can be ranked"
        )


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax over the last axis, whatever the model's dtype."""
    return torch.log_softmax(logits.float(), dim=-1)


def log_gamma(gamma: float) -> float:
    """log(gamma) with gamma = 0 -> -inf (accept all) and gamma = inf -> +inf (reject all)."""
    if gamma == 0:
        return -math.inf
    return math.log(gamma)


def gated_gammas(top_logps: Sequence[float], gamma: float, *, certainty: float, gamma_uncertain: float) -> list[float]:
    """Each unit's ratio-test gamma under the certainty gate (docs/algorithm.md, "The certainty gate").

    `top_logps[i]` is log of the Generalist's top probability over unit i's positions (its most
    certain one). Where the Generalist is certain (top probability >= `certainty`) the draft
    meets the paper's test at `gamma`: a fact the cloud knows is the cloud's to decide. Where it
    is not, any of several continuations is about as good to it, and the draft, which carries the
    user's form, is tested at `gamma_uncertain`. `certainty` 0 gives `gamma` everywhere (the
    paper's rule); `certainty` above every top probability gives `gamma_uncertain` everywhere.
    """
    if certainty == 0:
        return [gamma] * len(top_logps)
    floor = math.log(certainty)
    return [gamma if top >= floor else gamma_uncertain for top in top_logps]


def is_form_text(text: str) -> bool:
    """Whether a token's text is form only (docs/algorithm.md, "The form rule"): whitespace,
    punctuation and symbols, no letter or digit of any script. Empty text (a special token) and a
    piece of a character (byte-level tokens decode one to U+FFFD) are not form: what they stand
    for is unknown here, so the paper's test decides them."""
    return bool(text) and "\ufffd" not in text and not any(ch.isalnum() for ch in text)


def form_gammas(gammas: Sequence[float], is_form: Sequence[bool], gamma_form: float | None) -> list[float]:
    """Each unit's ratio-test gamma under the form rule (docs/algorithm.md, "The form rule"): a
    unit whose every token is form (`is_form_text`: layout, punctuation) is tested at `gamma_form`,
    any other at its gamma from `gammas` (the paper's, or the certainty gate's). A lower
    `gamma_form` keeps more of the device's form (where a line ends, how a list is marked) while
    every word, name and number still meets the cloud's test. `gamma_form` None: off."""
    if len(gammas) != len(is_form):
        raise ValueError(f"one form flag per unit: {len(is_form)} flags for {len(gammas)} units")
    if gamma_form is None:
        return list(gammas)
    return [gamma_form if form else gamma for gamma, form in zip(gammas, is_form, strict=True)]


def verify_ratios(
    log_ratios: Sequence[float],
    gamma: float | Sequence[float],
    *,
    sampling: bool,
    uniforms: Sequence[float] | None = None,
) -> int:
    """How many leading units (tokens, or cross-vocabulary segments) pass the ratio test.

    A unit's log ratio is log P_G - log P_S^0 of its tokens. Greedy: accept iff
    P_G > gamma * P_S^0 (strict). Sampling: accept with probability min(1, P_G / (gamma * P_S^0)),
    i.e. iff u < that, with `uniforms[i]` ~ U[0, 1) drawn by the caller. Stops at the first rejection.
    `gamma` is one threshold for every unit, or one per unit (`gated_gammas`, `form_gammas`).

    A unit P_G rules out (ratio -inf, or NaN for 0/0) is rejected in both modes, for every gamma,
    0 included: greedy's 0 > gamma * P_S^0 is false, and sampling takes the limit gamma -> 0+ of
    0 / (gamma * P_S^0), which is 0 (it accepted such a unit at gamma = 0 while greedy rejected
    it). So gamma = 0 accepts every draft P_G allows, which is every draft of a model with finite
    logits (algorithm.md's gamma = 0 oracle).
    """
    gammas = [gamma] * len(log_ratios) if isinstance(gamma, (int, float)) else list(gamma)
    if len(gammas) < len(log_ratios):
        raise ValueError("per-unit gammas need one gamma per unit")
    if sampling and (uniforms is None or len(uniforms) < len(log_ratios)):
        raise ValueError("sampling mode needs one uniform draw per unit")
    for i, ratio in enumerate(log_ratios):
        threshold = log_gamma(gammas[i])
        if math.isnan(ratio) or ratio == -math.inf:
            return i  # P_G = 0 (0/0 when P_S^0 = 0 too): pi* rules the unit out
        if sampling:
            assert uniforms is not None
            if not uniforms[i] < acceptance_probability(ratio, threshold):
                return i
        elif not ratio > threshold:
            return i
    return len(log_ratios)


def acceptance_probability(log_ratio: float, log_gamma_value: float) -> float:
    """min(1, exp(log_ratio) / gamma), without overflow: 0 for a unit P_G rules out (log_ratio
    -inf or NaN) whatever gamma, else 1 when gamma = 0 and 0 when gamma = inf."""
    if math.isnan(log_ratio) or log_ratio == -math.inf:
        return 0.0
    excess = log_ratio - log_gamma_value
    if math.isnan(excess):  # inf - inf: P_S^0 = 0 against gamma = inf, which rejects everything
        return 0.0
    return 1.0 if excess >= 0 else math.exp(excess)


def verify_exact_greedy(matches: Sequence[bool]) -> int:
    """Standard speculative decoding, greedy: accept units while each is the target's greedy
    choice (`matches[i]`: unit i's tokens are the argmax of P_G at their positions)."""
    for i, match in enumerate(matches):
        if not match:
            return i
    return len(matches)


def steering_values(logp_g: torch.Tensor, logp_s0: torch.Tensor, alpha: float) -> torch.Tensor:
    """v(y) = log P_G(y) - alpha * log P_S^0(y), always finite (the wire carries finite float32s).

    Finite log-probabilities enter as they are. log P_S^0 = -inf enters as `LOGP_FLOOR`; a token
    P_G rules out (log P_G = -inf) gets `RULED_OUT`, below every token P_G allows, whatever P_S^0
    says (`core.recovery` states the conventions).
    """
    g = logp_g.float()
    values = g if alpha == 0 else g - alpha * floored(logp_s0)
    return torch.where(torch.isneginf(g), torch.full_like(values, RULED_OUT), values)


def top_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest entries, best first; ties broken by the lower index so runs are reproducible.

    Over a whole vocabulary a full stable sort costs tens of ms a call on a CPU (it ran every
    token); `topk` finds the k-th value in linear time, and only the entries at or above it (every
    tie included, in index order) are stably sorted, which gives exactly the full sort's first k.
    """
    k = min(k, scores.shape[-1])
    refuse_nan(scores)
    if scores.dim() != 1 or k == scores.shape[0] or k == 0:
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
    if logp_s0 is None and alpha != 0:
        raise ValueError("P_S^0 is needed when alpha != 0")
    refuse_nan(logp_g, logp_s0 if alpha != 0 else None)
    values = steering_values(logp_g, logp_g if logp_s0 is None else logp_s0, alpha)
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
