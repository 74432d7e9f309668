"""The speed benchmark's cost model: a speculative round's floor and the tokens it commits.

Pure functions of measured costs (`Costs`, seconds) and the i.i.d. per-token acceptance a: a
round commits E(K) = 1 + a(1-a^K)/(1-a) tokens, and costs K draft steps (each a forward and a draw
from its row), one check of the egress guard, the cloud's K+1-token blocks and one RTT.
`bench.speed` fits a to its runs, checks the prediction against them, and projects it (the
crossover block/step ratio, a paper-size pair).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Costs",
    "best_k",
    "crossover_ratio",
    "expected_tokens",
    "fit_acceptance",
    "fusion_round",
    "predicted_tps",
    "projected_speedup",
    "round_floor",
]


@dataclass(frozen=True)
class Costs:
    """Seconds. `g_blocks`/`s_blocks`: measured block cost by block size (1 = a step), on the
    cloud's prompt; `draft_step`: on the device's prompt (with the retrieved examples). The
    prefills are the once-a-session costs: the device's private prompt (before Open), and each
    cloud model's public prompt (at Open). The device's work around its forwards (`bench.device_work`):
    `greedy_pick` and `sampled_draw`, a token chosen from a whole row either way; `guard_check`, one
    check of the egress guard over what a round sends; `fuse`, fusion's decoding of the cloud's dense
    vector and its fused choice (in the mode the run samples). Zero where not timed (or the guard is
    off)."""

    draft_step: float
    g_blocks: dict[int, float]
    s_blocks: dict[int, float]
    device_prefill: float = 0.0
    g_prefill: float = 0.0
    s_prefill: float = 0.0
    greedy_pick: float = 0.0
    sampled_draw: float = 0.0
    guard_check: float = 0.0
    fuse: float = 0.0

    @property
    def g_step(self) -> float:
        return self.g_blocks[1]

    @property
    def s_step(self) -> float:
        return self.s_blocks[1]

    def g_block(self, n: int) -> float:
        return self.g_blocks[n] if n in self.g_blocks else _line(self.g_blocks, n)

    def s_block(self, n: int) -> float:
        return self.s_blocks[n] if n in self.s_blocks else _line(self.s_blocks, n)

    def verify_block(self, k: int, *, generic: bool = True) -> float:
        """The cloud's floor for one round: both cloud models' K+1-token blocks (the Generalist's
        alone for `sd`, which never reads P_S^0)."""
        return self.g_block(k + 1) + (self.s_block(k + 1) if generic else 0.0)

    def choice(self, sampling: bool) -> float:
        """What choosing one drafted token from its row costs the device, in that mode."""
        return self.sampled_draw if sampling else self.greedy_pick

    def as_dict(self) -> dict[str, Any]:
        return {
            "draft_step": self.draft_step,
            "g_blocks": {str(n): v for n, v in self.g_blocks.items()},
            "s0_blocks": {str(n): v for n, v in self.s_blocks.items()},
            "device_prefill": self.device_prefill,
            "g_prefill": self.g_prefill,
            "s0_prefill": self.s_prefill,
            "greedy_pick": self.greedy_pick,
            "sampled_draw": self.sampled_draw,
            "guard_check": self.guard_check,
            "fuse": self.fuse,
        }


def _line(points: dict[int, float], n: int) -> float:
    """Least-squares line through the measured (block size, seconds) points, read at n."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return max(my + slope * (n - mx), 0.0)


def expected_tokens(a: float, k: int) -> float:
    """Tokens a round commits with i.i.d. per-token acceptance a: the accepted prefix plus one
    recovery (on a rejection) or steered bonus token (on full acceptance)."""
    if a >= 1:
        return k + 1.0
    return 1 + a * (1 - a**k) / (1 - a)


def fit_acceptance(mean_accepted: float, k: int) -> float:
    """The i.i.d. per-token acceptance a with a(1-a^K)/(1-a) = mean accepted per full round."""
    target = min(max(mean_accepted, 0.0), k - 1e-9)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) - 1 < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def round_floor(costs: Costs, k: int, rtt: float, *, generic: bool = True, sampling: bool = False) -> float:
    """A speculative round at its floor: K draft steps, each a forward and a choice from its row (a
    sampled draw or an argmax), one guard check, the cloud blocks, one RTT."""
    drafts = k * (costs.draft_step + costs.choice(sampling))
    return drafts + costs.guard_check + costs.verify_block(k, generic=generic) + rtt


def fusion_round(costs: Costs, rtt: float, *, generic: bool = True) -> float:
    """A `fusion` round (one token): the device's step, the guard's check of the token it sends, both
    cloud models' steps, one RTT, and the device's fusion of the dense vector with its row."""
    cloud = costs.verify_block(0, generic=generic)  # a block of one token: each model's step
    return costs.draft_step + costs.guard_check + cloud + rtt + costs.fuse


def predicted_tps(a: float, k: int, costs: Costs, rtt: float, *, sampling: bool = False) -> float:
    return expected_tokens(a, k) / round_floor(costs, k, rtt, sampling=sampling)


def best_k(a: float, costs: Costs, rtt: float, k_max: int, *, sampling: bool = False) -> int:
    return max(range(1, k_max + 1), key=lambda k: predicted_tps(a, k, costs, rtt, sampling=sampling))


def crossover_ratio(a: float, k: int, draft_ratio: float, s0_ratio: float, rtt_steps: float) -> float:
    """The block/step ratio r below which a speculative round beats the target alone, when a
    (K+1)-token block costs r steps for both cloud models (costs in units of a target step):
    E(K) / (K d + r (1 + s) + rtt) > 1  <=>  r < (E(K) - K d - rtt) / (1 + s)."""
    return (expected_tokens(a, k) - k * draft_ratio - rtt_steps) / (1 + s0_ratio)


def projected_speedup(a: float, k: int, draft_ratio: float, s0_ratio: float, r: float, rtt_steps: float) -> float:
    """Speedup over the target alone (which pays no per-token RTT), costs in target steps."""
    return expected_tokens(a, k) / (k * draft_ratio + r * (1 + s0_ratio) + rtt_steps)
