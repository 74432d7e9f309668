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

__all__ = ["DRAW_BLOCK", "LOGP_FLOOR", "choose", "device_rng", "floored", "inverse_cdf", "recovery_scores"]

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
    scaled = x if temperature == 1.0 else x / np.float32(temperature)
    weights = np.exp(scaled - scaled.max())  # float32 in [0, 1], the largest exactly 1
    return inverse_cdf(weights, (generator if generator is not None else np.random.default_rng()).random())


# A draw sums blocks of this many weights, then cumulates within the one block it falls in: one
# float64 cumulative sum over a 152k vocabulary cost 2.0 ms a drawn token on this CPU, a tenth of
# the int4 drafter's 19 ms step; two levels take 0.3 ms (bench.sampling_draw).
DRAW_BLOCK = 1024


def inverse_cdf(weights: NDArray[np.float32], uniform: float) -> int:
    """The first index whose cumulative weight (summed in float64) exceeds `uniform` (in [0, 1)) times
    the total: an entry of weight 0 is never drawn. Two levels, blocks then one block's entries."""
    n = len(weights)
    full = n - n % DRAW_BLOCK
    sums = weights[:full].reshape(-1, DRAW_BLOCK).sum(axis=1, dtype=np.float64)
    if full < n:
        sums = np.append(sums, weights[full:].sum(dtype=np.float64))
    ends = np.cumsum(sums)
    target = uniform * ends[-1]
    block = min(int(np.searchsorted(ends, target, side="right")), len(ends) - 1)
    start = block * DRAW_BLOCK
    inside = np.cumsum(weights[start : start + DRAW_BLOCK], dtype=np.float64)
    offset = int(np.searchsorted(inside, target - (ends[block - 1] if block else 0.0), side="right"))
    if offset < len(inside) and weights[start + offset] > 0:
        return start + offset
    # Rounding between a block's sum and its own cumulative sum put the target at the block's end:
    # the last entry with weight, there or before it.
    return int(np.flatnonzero(weights[: start + len(inside)])[-1])
