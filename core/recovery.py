"""SpecSteer's device-side decision rules, as pure functions over numpy arrays: recovery (and the
steered bonus token) and the draw of every token the device writes.

The cloud's rules (`core.steering`: the ratio test, the top-k steering vector) run on torch
tensors beside its models; these run in the device process, which drafts on onnxruntime-genai or
llama.cpp and never imports torch. A torch row on the CPU (the torch drafter's) is read as a numpy
array without a copy. Same conventions as `core.steering`: fp32 log-probabilities, a probability
of 0 handled as below (`LOGP_FLOOR`, `RULED_OUT`), NaN refused, randomness passed in
(`numpy.random.Generator`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsteer.core.errors import ModelLoadError

__all__ = [
    "DRAW_BLOCK",
    "LOGP_FLOOR",
    "RULED_OUT",
    "block_sums",
    "choose",
    "device_rng",
    "floored",
    "inverse_cdf",
    "recovery_scores",
    "refuse_nan",
]

# The conventions for a probability of exactly 0 (log = -inf). A model gives one to a token it
# masks (a -inf logit) or a multi-token candidate whose fp32 sum underflows; unhandled, v = log P_G
# - alpha log P_S^0 would be +inf or NaN, which the wire refuses (it carries finite float32s). Only
# the non-finite values are replaced; every finite log-probability enters a value or a score as
# computed (a floor on finite values changed candidate values, recoveries and the literal ranking
# on peaked rows, whose tails lie far below any floor):
# - log P_S^0 or log P_S^c = -inf enters as `LOGP_FLOOR`, the log of the smallest normal float32
#   (about -87.34): a token P_S^0 rules out carries a large, finite personal boost, and one that
#   P_S^c and P_S^0 both rule out is neutral (its fused score is log P_G).
# - log P_G = -inf makes v = `RULED_OUT`, the most negative finite float32, whatever P_S^0 says:
#   pi* gives the token probability 0, so it must never outrank a token the Generalist allows (a
#   floor on both terms gave it (1 - alpha) * floor, positive for alpha > 1). Its recovery score
#   stays at `RULED_OUT` (adding alpha * log P_S^c, at least alpha * `LOGP_FLOOR`, does not move
#   a float32 of that size), below every score of a token P_G allows, and weighs 0 when sampled.
# NaN is not a probability: a row holding one comes from a broken model (damaged weights, an
# overflow in its dtype) and is refused (`ModelLoadError`), never decoded.
# The ratio test uses none of this: P_G > gamma * 0 is well defined (core.steering.verify_ratios).
LOGP_FLOOR = math.log(float(np.finfo(np.float32).tiny))
RULED_OUT = float(np.finfo(np.float32).min)


def floored(logp: Any) -> NDArray[np.float32]:
    """fp32 log-probabilities with -inf (probability 0) replaced by `LOGP_FLOOR`; finite values
    unchanged. NaN is refused (`ModelLoadError`)."""
    x = np.asarray(logp, dtype=np.float32)
    refuse_nan(x)
    return np.where(np.isneginf(x), np.float32(LOGP_FLOOR), x)


def refuse_nan(x: NDArray[np.float32], what: str = "log-probabilities") -> None:
    """Raise `ModelLoadError` if `x` holds a NaN: no rule ranks or draws it, and decoding on would
    pick an arbitrary token (argmax returns a NaN's index; a draw's weights all become NaN)."""
    if np.isnan(x).any():
        raise ModelLoadError(
            f"the model's {what} hold NaN (its logits are not numbers: damaged weights, or an overflow "
            "in its dtype); no token can be ranked or drawn"
        )


def recovery_scores(values: Any, logp_sc: Any, alpha: float) -> NDArray[np.float32]:
    """z_rec(c) = v(c) + alpha * log P_S^c(c) over the candidates (-inf in log P_S^c enters as
    `LOGP_FLOOR`; a `RULED_OUT` value stays the lowest score)."""
    v = np.asarray(values, dtype=np.float32)
    refuse_nan(v, "steering values")
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
    refuse_nan(x, "scores")
    if not sampling:
        return int(np.argmax(x))
    with np.errstate(over="ignore"):  # `RULED_OUT` / T < 1 is -inf: weight 0, as it should be
        scaled = x if temperature == 1.0 else x / np.float32(temperature)
    if not np.isfinite(scaled.max()):
        # Every score -inf (or `RULED_OUT` pushed to -inf by a temperature below 1): no weights
        # to draw by. Take the first of them, as greedy would.
        return int(np.argmax(x))
    with np.errstate(over="ignore"):  # scores ±3.4e38 apart overflow to -inf: weight 0, as they should
        weights = np.exp(scaled - scaled.max())  # float32 in [0, 1], the largest exactly 1
    return inverse_cdf(weights, (generator if generator is not None else np.random.default_rng()).random())


# A draw sums blocks of this many weights, then cumulates within the one block it falls in: one
# float64 cumulative sum over a 152k vocabulary cost 2.0 ms a drawn token on this CPU, a tenth of
# the int4 drafter's 19 ms step; two levels take 0.3 ms (bench.sampling_draw).
DRAW_BLOCK = 1024


def block_sums(weights: NDArray[np.float32]) -> NDArray[np.float64]:
    """The float64 sums of `weights`' `DRAW_BLOCK`-entry blocks (the last may be shorter), in numpy's
    order (pairwise summation): what a second device must reproduce bit for bit."""
    full = len(weights) - len(weights) % DRAW_BLOCK
    sums = weights[:full].reshape(-1, DRAW_BLOCK).sum(axis=1, dtype=np.float64)
    if full < len(weights):
        sums = np.append(sums, weights[full:].sum(dtype=np.float64))
    return sums


def inverse_cdf(weights: NDArray[np.float32], uniform: float) -> int:
    """The first index whose cumulative weight (summed in float64) exceeds `uniform` (in [0, 1)) times
    the total: an entry of weight 0 is never drawn. Two levels, blocks then one block's entries."""
    ends = np.cumsum(block_sums(weights))
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
