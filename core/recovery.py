"""SpecSteer's device-side decision rules, as pure functions over numpy arrays: recovery (and the
steered bonus token) and the draw of every token the device writes.

The cloud's rules (`core.steering`: the ratio test, the top-k steering vector) run on torch
tensors beside its models; these run in the device process, which drafts on onnxruntime-genai or
llama.cpp and never imports torch. A torch row on the CPU (the torch drafter's) is read as a numpy
array without a copy. Same conventions as `core.steering`: fp32 log-probabilities, floored at
`LOGP_FLOOR` where they enter a score, randomness passed in (`numpy.random.Generator`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["LOGP_FLOOR", "choose", "device_rng", "floored", "recovery_scores"]

# Log-probabilities enter steering values and recovery scores floored here: log of the smallest
# normal float32, about -87.34. A model may give a token exactly zero probability (a -inf logit,
# or a multi-token candidate whose fp32 sum underflows); unfloored, v = log P_G - alpha log P_S^0
# would be +inf, which the wire refuses, and 0/0 ratios would be NaN. Floored, every value is
# finite: a token P_S^0 rules out carries the largest personal boost the floor allows, and one
# that P_S^c and P_S^0 both rule out is neutral (its fused score is log P_G). The ratio test does
# not use the floor: P_G > gamma * 0 is well defined.
LOGP_FLOOR = math.log(float(np.finfo(np.float32).tiny))


def floored(logp: Any) -> NDArray[np.float32]:
    """fp32 log-probabilities with -inf and NaN raised to `LOGP_FLOOR`."""
    x = np.asarray(logp, dtype=np.float32)
    return np.maximum(np.nan_to_num(x, nan=LOGP_FLOOR, neginf=LOGP_FLOOR), np.float32(LOGP_FLOOR))


def recovery_scores(values: Any, logp_sc: Any, alpha: float) -> NDArray[np.float32]:
    """z_rec(c) = v(c) + alpha * log P_S^c(c) over the candidates (log P_S^c floored like v's terms)."""
    v = np.asarray(values, dtype=np.float32)
    if alpha == 0:
        return v
    return v + np.float32(alpha) * floored(logp_sc)


def device_rng(seed: int) -> np.random.Generator:
    """The device's source of randomness for one generation (sampling mode), from its seed."""
    return np.random.Generator(np.random.PCG64(seed))


def choose(
    scores: Any,
    *,
    sampling: bool,
    temperature: float = 1.0,
    generator: np.random.Generator | None = None,
) -> int:
    """Greedy: index of the largest score (the first on ties). Sampling: draw from softmax(scores / T),
    by inverting its cumulative distribution at one uniform draw."""
    x = np.asarray(scores, dtype=np.float32)
    if not sampling:
        return int(np.argmax(x))
    logits = x.astype(np.float64) / temperature
    weights = np.exp(logits - logits.max())
    cumulative = np.cumsum(weights)
    u = (generator if generator is not None else np.random.default_rng()).random() * cumulative[-1]
    # The first index whose cumulative weight exceeds u: never a zero-weight entry.
    return int(min(np.searchsorted(cumulative, u, side="right"), len(cumulative) - 1))
