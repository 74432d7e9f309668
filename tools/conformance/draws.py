"""Sampled draws, as the device makes them (`core.recovery`): its random generator, `choose` and
`inverse_cdf`.

`steering/draws.json` holds four types of vector (`type`):

- `rng`: a `seed` (a decimal string: seeds go past JSON's exact integers) and the first doubles
  `device_rng(seed).random()` gives (numpy's `Generator(PCG64(seed))`);
- `choose`: scores (given, or built by a `recipe` from a seed), `sampling`, `temperature` and a
  list of `uniforms`: the index `choose` picks with each uniform as the generator's draw;
- `inverse-cdf`: float32 weights built by a `recipe`, numpy's float64 sums of their 1,024-entry
  blocks (`block_sums`, exact) and the index `inverse_cdf` picks at each uniform;
- `sequence`: a `seed`, a `temperature` and score `rows`: the indices `choose` draws from the rows
  in order with one `device_rng(seed)`, as a generation draws its tokens.

numpy's float32 `exp` is not correctly rounded on every machine (on x86 with AVX2 or AVX-512 it is
up to 2 ulp off; `python -m tools.conformance.draws --exp-ulp` measures it against
Math.fround(Math.exp)), so no `choose` or `sequence` vector may hang on its last bits: `build`
refuses one whose index would change with any weight 4e-7 (relative) off, or a weight in float32's
subnormal range flushed to 0 or not (`_Bounds`), and moves a uniform of a large row by a few 1e-6
where a token's edge is that near (`_nudged`). Rows whose weights are all exactly 0 or 1 (a
`flat` recipe) are exact on every machine, so their uniforms sit right at the block edges.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from specsteer.core.cli import EXIT_OK, Parser, reported
from specsteer.core.recovery import DRAW_BLOCK, RULED_OUT, block_sums, choose, device_rng, inverse_cdf
from tools.conformance.common import ConformanceError, dec, enc, f32, mismatch

FILE = "steering/draws.json"
LAST_UNIFORM = 1.0 - 2.0**-53  # the largest double `random()` gives
EXP_SLACK = 4e-7  # relative error allowed another float32 exp (numpy's measured: at most 2 ulp, 2.4e-7)
SUBNORMAL = float(np.finfo(np.float32).tiny)  # weights below it may be flushed to 0, or not
NEVER = -110.0  # e^-110 is below half float32's smallest subnormal: a weight of 0 on every machine


# -- the generator -----------------------------------------------------------------------------------------

RNG_SEEDS: tuple[tuple[int, int, str], ...] = (
    (0, 1000, "seed 0, the default"),
    (1, 100, "seed 1"),
    (42, 100, "seed 42"),
    (2**32 - 1, 100, "the largest one-word seed"),
    (2**32 + 5, 100, "a two-word seed (SeedSequence reads it as 32-bit words, least significant first)"),
    (2**63 - 1, 100, "the largest int64"),
    (2**64 + 3, 100, "three words"),
    (2**128 + 7, 100, "five words: more than SeedSequence's pool of four, mixed in after it"),
)


def rng_outcome(v: dict[str, Any]) -> dict[str, Any]:
    return {"random": device_rng(int(v["seed"])).random(v["count"]).tolist()}


def _rng_vectors() -> list[dict[str, Any]]:
    out = []
    for seed, n, description in RNG_SEEDS:
        v: dict[str, Any] = {"name": f"rng-{seed}", "type": "rng", "description": description, "seed": str(seed),
                             "count": n}  # fmt: skip
        v["expected"] = rng_outcome(v)
        out.append(v)
    return out


# -- recipes: large rows built from a seed, not stored ---------------------------------------------------------


def recipe_scores(r: dict[str, Any]) -> NDArray[np.float32]:
    """A row of `size` float32 scores. `shape` "random": score i = float32(-scale * u_i * u_i), u_i the
    i-th `random()` of `device_rng(seed)` (one per entry, every entry); "flat": 0 everywhere (no
    draw). Then -inf where i % minus_inf[0] == minus_inf[1], else `RULED_OUT` where i % ruled_out[0]
    == ruled_out[1], and -inf for the last `tail` entries."""
    n = int(r["size"])
    if r["shape"] == "random":
        u = device_rng(int(r["seed"])).random(n)
        x = (-float(r["scale"]) * u * u).astype(np.float32)
    elif r["shape"] == "flat":
        x = np.zeros(n, dtype=np.float32)
    else:
        raise ConformanceError(f"unknown recipe shape {r['shape']!r}")
    i = np.arange(n)
    x[i % r["ruled_out"][0] == r["ruled_out"][1]] = np.float32(RULED_OUT)
    x[i % r["minus_inf"][0] == r["minus_inf"][1]] = -np.inf
    if r["tail"]:
        x[n - r["tail"] :] = -np.inf
    return x


def recipe_weights(r: dict[str, Any]) -> NDArray[np.float32]:
    """`size` float32 weights: weight i = float32(u^8) (u = the i-th `random()` of `device_rng(seed)`,
    u^8 as ((u*u)^2)^2 in doubles): many magnitudes, so the order of a sum shows in its last bits;
    0 where i % zero[0] == zero[1] and for the last `tail` entries."""
    n = int(r["size"])
    u = device_rng(int(r["seed"])).random(n)
    a = u * u
    b = a * a
    w = (b * b).astype(np.float32)
    w[np.arange(n) % r["zero"][0] == r["zero"][1]] = 0
    if r["tail"]:
        w[n - r["tail"] :] = 0
    return w


# -- choose ------------------------------------------------------------------------------------------------


class _Fixed:
    """A generator whose next draw is the given uniform."""

    def __init__(self, uniform: float) -> None:
        self.uniform = uniform

    def random(self) -> float:
        return self.uniform


def _scores(v: dict[str, Any]) -> NDArray[np.float32]:
    if v["recipe"] is not None:
        return recipe_scores(v["recipe"])
    return np.asarray([dec(x) for x in v["scores"]], dtype=np.float32)


def _choose(scores: NDArray[np.float32], sampling: bool, temperature: float, uniform: float) -> int:
    generator = cast(np.random.Generator, _Fixed(uniform))
    return choose(scores, sampling=sampling, temperature=temperature, generator=generator)


def choose_outcome(v: dict[str, Any]) -> dict[str, Any]:
    x = _scores(v)
    if not v["sampling"]:
        return {"indices": [_choose(x, False, v["temperature"], 0.0)]}
    return {"indices": [_choose(x, True, v["temperature"], float(u)) for u in v["uniforms"]]}


class _Bounds:
    """What another float32 exp may make of `choose`'s weights for one row and temperature. The
    reference is float32(libm's float64 exp) (what Math.fround(Math.exp(x)) gives, and the same on
    every machine, unlike numpy's float32 exp): a weight of 1 (the maximum) or 0 (a scaled score
    `NEVER` or more below it) is exact; any other within `EXP_SLACK` of the reference, and anything
    up to float32's smallest normal where the reference is below it. `none`: no weights (every
    scaled score -inf)."""

    def __init__(self, scores: NDArray[np.float32], temperature: float) -> None:
        with np.errstate(over="ignore"):
            scaled = scores if temperature == 1.0 else scores / np.float32(temperature)
            self.none = not np.isfinite(scaled.max())
            if self.none:
                return
            d = scaled - scaled.max()
        ref = np.asarray([math.exp(float(z)) for z in d], dtype=np.float32).astype(np.float64)
        self.lo, self.hi = ref * (1 - EXP_SLACK), ref * (1 + EXP_SLACK)
        tiny = ref < SUBNORMAL
        self.lo[tiny], self.hi[tiny] = 0.0, SUBNORMAL * (1 + EXP_SLACK)
        exact = (d == 0) | (d <= NEVER)
        self.lo[exact], self.hi[exact] = ref[exact], ref[exact]
        self.exact = bool(exact.all())
        self.ref = ref
        self.before_lo = np.concatenate([[0.0], np.cumsum(self.lo)])  # sums of the first i bounds
        self.before_hi = np.concatenate([[0.0], np.cumsum(self.hi)])

    def robust(self, uniform: float, index: int) -> bool:
        """Whether the draw at `uniform` picks `index` with every weight anywhere in its bounds:
        those before it at their largest and those after at their smallest, and the reverse (index
        is drawn iff sum(w[:index]) <= u * total < sum(w[:index + 1])). A row of exact weights is
        robust as it is: both devices sum them in numpy's order."""
        if self.none or self.exact:
            return True
        n = len(self.lo)
        after_lo = self.before_lo[n] - self.before_lo[index]  # sums from index on
        after_hi = self.before_hi[n] - self.before_hi[index + 1]  # sums after index
        low = (1 - uniform) * self.before_hi[index] - uniform * after_lo <= 0
        high = (1 - uniform) * self.before_lo[index + 1] - uniform * after_hi > 0
        return bool(low and high and self.ref[index] > 0)

    def block_edges(self) -> NDArray[np.float64]:
        """Where each block's cumulative weight ends, as a fraction of the total (reference weights)."""
        ends = np.cumsum(block_sums(self.ref.astype(np.float32)))
        return cast(NDArray[np.float64], ends / ends[-1])


def _around(at: float) -> list[float]:
    """`at` and the doubles either side of it, those below 1 (a uniform never reaches 1)."""
    return [u for u in (math.nextafter(at, 0.0), at, math.nextafter(at, 1.0)) if u < 1]


def _nudged(scores: NDArray[np.float32], temperature: float, bounds: _Bounds, uniform: float, away: int) -> float:
    """`uniform`, or the nearest of uniform + k·1e-6 (k = `away`, 2·`away`, ...) whose draw does not hang
    on exp (`_Bounds.robust`): on a large vocabulary a token's edge is often within exp's rounding."""
    for k in range(64):
        u = uniform + away * k * 1e-6
        if 0 <= u < 1 and bounds.robust(u, _choose(scores, True, temperature, u)):
            return u
    raise ConformanceError(f"no uniform near {uniform!r} draws the same under every exp rounding")


def _edges(scores: NDArray[np.float32], temperature: float, blocks: Sequence[int]) -> list[float]:
    """Uniforms at the ends of some blocks: for exact weights the end itself and one double either
    side; otherwise 2e-6 of the total either side, or a little more where a token's own edge is that
    near (`_nudged`)."""
    bounds = _Bounds(scores, temperature)
    ends = bounds.block_edges()
    out = []
    for b in blocks:
        at = float(ends[b])
        if bounds.exact:
            out += _around(at)
        else:
            out += [
                _nudged(scores, temperature, bounds, at - 2e-6, -1),
                _nudged(scores, temperature, bounds, at + 2e-6, 1),
            ]
    return out


def _logps(probs: Sequence[float]) -> list[float]:
    return [f32(math.log(p)) if p > 0 else -math.inf for p in probs]


UNIFORMS = [0.0, 0.03125, 0.1, 0.25, 0.3333333333333333, 0.5, 0.6180339887498949, 0.75, 0.875, 0.995, LAST_UNIFORM]


def _recipe(seed: int, size: int, shape: str, tail: int = 0) -> dict[str, Any]:
    return {"seed": str(seed), "size": size, "shape": shape, "scale": 30.0, "minus_inf": [7, 3], "ruled_out": [11, 5],
            "tail": tail}  # fmt: skip


def _choose_vectors() -> list[dict[str, Any]]:
    probs = [0.4, 0.25, 0.15, 0.1, 0.06, 0.03, 0.01]
    small = _logps(probs)
    holes = _logps([0.45, 0.0, 0.2, 0.0, 0.35, 0.0, 0.0])
    holes[5] = RULED_OUT
    cum = np.cumsum(probs)[:-1].tolist()
    near = [c + s for c in cum for s in (-1e-5, 1e-5)]
    big = float(np.finfo(np.float32).max) * 0.875
    # (name, description, scores or None, recipe or None, sampling, temperature, uniforms)
    cases: list[tuple[str, str, list[float] | None, dict[str, Any] | None, bool, float, list[float]]] = []
    for t in (1.0, 0.7, 1.3):
        cases.append((f"small-t{t}", f"seven log-probabilities at temperature {t}; uniforms across [0, 1)", small,
                      None, True, t, UNIFORMS + (near if t == 1.0 else [])))  # fmt: skip
    cases += [
        ("small-greedy", "greedy: the largest score, whatever the uniforms", small, None, False, 1.0, []),
        ("greedy-ties", "greedy: the first of equal largest scores", [-1.0, -0.5, -2.0, -0.5, -0.5], None, False, 1.0,
         []),
        ("holes", "-inf and RULED_OUT entries weigh 0: never drawn, not even at uniform 0 or the last uniform",
         holes, None, True, 1.0, UNIFORMS),
        ("holes-t0.7", "the same at temperature 0.7 (RULED_OUT / 0.7 overflows to -inf)", holes, None, True, 0.7,
         UNIFORMS),
        ("all-minus-inf", "every score -inf: no weights; the first index, as greedy", [-math.inf] * 5, None, True, 1.0,
         [0.0, 0.5]),
        ("ruled-out-t1", "RULED_OUT and -inf at temperature 1: RULED_OUT - max = 0, the RULED_OUT entries weigh 1",
         [-math.inf, RULED_OUT, -math.inf, RULED_OUT, RULED_OUT], None, True, 1.0, [0.0, 0.4, 0.7, LAST_UNIFORM]),
        ("ruled-out-t0.7", "the same at temperature 0.7: RULED_OUT / 0.7 is -inf, no weights; the first largest score",
         [-math.inf, RULED_OUT, -math.inf, RULED_OUT, RULED_OUT], None, True, 0.7, [0.0, 0.5]),
        ("overflow-difference", "scores 3.0e38 apart: score - max overflows to -inf, weight 0", [-big, 0.0, big, -1.0],
         None, True, 1.0, [0.0, 0.5, LAST_UNIFORM]),
        ("overflow-temperature", "a score pushed to +inf by temperature 0.7: no weights; the first largest score",
         [0.0, big, -1.0, big], None, True, 0.7, [0.0, 0.5]),
        ("uniform-row", "six equal scores (weights exactly 1): the index is floor(6u); at u = 1/6 the target is "
         "exactly 1 and the first cumulative weight above it the second", [-2.5] * 6, None, True, 1.0,
         [0.0, 1 / 6, math.nextafter(1 / 6, 0.0), 0.5, 5 / 6, LAST_UNIFORM]),
    ]  # fmt: skip
    for size, seed in ((1024, 11), (1025, 12), (5000, 13), (151936, 14)):
        r = _recipe(seed, size, "random")
        x = recipe_scores(r)
        blocks = sorted({0, (size - 1) // DRAW_BLOCK // 2, max(0, (size - 1) // DRAW_BLOCK - 1)})
        for t in (1.0, 0.7, 1.3):
            bounds = _Bounds(x, t)
            edges = _edges(x, t, blocks) if size > DRAW_BLOCK else []
            uniforms = [_nudged(x, t, bounds, u, -1 if u > 0.5 else 1) for u in UNIFORMS] + edges
            cases.append((f"random-{size}-t{t}", f"{size} random scores at temperature {t}, -inf and RULED_OUT among "
                          "them; uniforms across [0, 1) (moved by a few 1e-6 where a token's edge is within exp's "
                          "rounding) and near block edges", None, r, True, t, uniforms))  # fmt: skip
    for size, seed, tail in ((1025, 21, 0), (5000, 22, 5), (151936, 23, 271)):
        r = _recipe(seed, size, "flat", tail)
        last = (size - 1) // DRAW_BLOCK
        edges = _edges(recipe_scores(r), 1.0, sorted({0, 1, 2, last - 1} & set(range(last))))
        cases.append((f"flat-{size}", f"{size} equal scores, -inf and RULED_OUT among them"
                      + (f" and the last {tail}" if tail else "") + ": weights exactly 0 or 1, uniforms at the block "
                      "edges (one double either side)", None, r, True, 1.0, UNIFORMS + edges))  # fmt: skip
    vectors = []
    for name, description, scores, recipe, sampling, t, uniforms in cases:
        v: dict[str, Any] = {
            "name": f"choose-{name}", "type": "choose", "description": description,
            "scores": None if scores is None else [enc(f32(s)) for s in scores], "recipe": recipe,
            "sampling": sampling, "temperature": t, "uniforms": uniforms,
        }  # fmt: skip
        v["expected"] = choose_outcome(v)
        bounds = _Bounds(_scores(v), t)
        for u, i in zip(uniforms, v["expected"]["indices"], strict=sampling):
            if not bounds.robust(u, i):
                raise ConformanceError(f"{FILE}: vector {v['name']!r}: uniform {u!r} hangs on the last bits of exp")
        vectors.append(v)
    return vectors


# -- inverse_cdf -------------------------------------------------------------------------------------------


def inverse_cdf_outcome(v: dict[str, Any]) -> dict[str, Any]:
    w = recipe_weights(v["recipe"])
    return {"block_sums": block_sums(w).tolist(), "indices": [inverse_cdf(w, float(u)) for u in v["uniforms"]]}


def _inverse_cdf_vectors() -> list[dict[str, Any]]:
    vectors = []
    for size, seed, tail in ((7, 31, 0), (1024, 32, 0), (1025, 33, 1), (5000, 34, 17), (151936, 35, 271)):
        r = {"seed": str(seed), "size": size, "zero": [5, 2], "tail": tail}
        ends = np.cumsum(block_sums(recipe_weights(r)))
        last = len(ends) - 1
        blocks = sorted({0, last // 2, last - 1} & set(range(last)))
        edges = [u for b in blocks for u in _around(float(ends[b] / ends[-1]))]
        v: dict[str, Any] = {
            "name": f"inverse-cdf-{size}", "type": "inverse-cdf",
            "description": f"{size} weights of many magnitudes (the sums' order shows in their last bits)"
            + (f", the last {tail} zero" if tail else "") + "; uniforms across [0, 1) and at block edges",
            "recipe": r, "uniforms": UNIFORMS + edges,
        }  # fmt: skip
        v["expected"] = inverse_cdf_outcome(v)
        vectors.append(v)
    return vectors


# -- sequences ---------------------------------------------------------------------------------------------


def sequence_outcome(v: dict[str, Any]) -> dict[str, Any]:
    rng = device_rng(int(v["seed"]))
    rows = [np.asarray([dec(x) for x in row], dtype=np.float32) for row in v["rows"]]
    return {"indices": [choose(row, sampling=True, temperature=v["temperature"], generator=rng) for row in rows]}


def _sequence_vectors() -> list[dict[str, Any]]:
    vectors = []
    for seed, t, vocab, n in ((0, 1.0, 9, 16), (7, 0.7, 9, 16), (2**40 + 1, 1.3, 12, 16)):
        make = random.Random(seed)  # the rows only (stored): Python's generator and libm, the same everywhere
        rows = []
        for _ in range(n):
            logits = [make.gauss(0.0, 2.0) if make.random() >= 0.2 else -math.inf for _ in range(vocab)]
            logits[make.randrange(vocab)] = 1.0  # at least one finite score
            top = max(logits)
            norm = top + math.log(math.fsum(math.exp(z - top) for z in logits))
            rows.append([enc(f32(z - norm)) for z in logits])
        v: dict[str, Any] = {
            "name": f"sequence-{seed}-t{t}", "type": "sequence",
            "description": f"{n} rows of {vocab} log-probabilities (some -inf) drawn in order with device_rng({seed}) "
            f"at temperature {t}",
            "seed": str(seed), "temperature": t, "rows": rows,
        }  # fmt: skip
        v["expected"] = sequence_outcome(v)
        uniforms = device_rng(seed).random(n).tolist()
        for k, (row, i) in enumerate(zip(rows, v["expected"]["indices"], strict=True)):
            if not _Bounds(np.asarray([dec(x) for x in row], dtype=np.float32), t).robust(uniforms[k], i):
                raise ConformanceError(f"{FILE}: vector {v['name']!r}: draw {k} hangs on the last bits of exp")
        vectors.append(v)
    return vectors


def build() -> dict[str, Any]:
    vectors = _rng_vectors() + _choose_vectors() + _inverse_cdf_vectors() + _sequence_vectors()
    return {"kind": "device-draws", "function": "specsteer.core.recovery.choose", "vectors": vectors}


_OUTCOMES = {"rng": rng_outcome, "choose": choose_outcome, "inverse-cdf": inverse_cdf_outcome,
             "sequence": sequence_outcome}  # fmt: skip


def check(doc: dict[str, Any]) -> list[str]:
    problems = []
    for v in doc["vectors"]:
        outcome = _OUTCOMES.get(v.get("type"))
        if outcome is None:
            problems.append(mismatch(FILE, v["name"], "type", sorted(_OUTCOMES), v.get("type")))
            continue
        got = outcome(v)
        if got != v["expected"]:
            problems.append(mismatch(FILE, v["name"], "draws", v["expected"], got))
    return problems


# -- the exp measurement -----------------------------------------------------------------------------------

_NODE_EXP = """
const fs = require("node:fs");
const x = new Float32Array(fs.readFileSync(process.argv[1]).buffer.slice(0));
const y = new Float32Array(x.length);
for (let i = 0; i < x.length; i++) y[i] = Math.exp(x[i]);
fs.writeFileSync(process.argv[2], new Uint8Array(y.buffer));
"""


def exp_ulp(n: int, seed: int = 0) -> str:
    """How often numpy's float32 exp differs from Math.fround(Math.exp(x)) (node's, or the float32
    rounding of float64 exp where no node is on PATH), on `n` float32 inputs uniform in [-20, 0] and
    [-104, 0] (half each: the range of a weight's exponent, scaled - max)."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(-20, 0, n // 2), rng.uniform(-104, 0, n - n // 2)]).astype(np.float32)
    ours = np.exp(x)
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "x.f32", Path(tmp) / "y.f32"
        x.tofile(inp)
        try:
            subprocess.run(["node", "-e", _NODE_EXP, str(inp), str(out)], check=True)
            theirs, what = np.fromfile(out, dtype=np.float32), "node's Math.fround(Math.exp(x))"
        except FileNotFoundError:
            theirs, what = np.exp(x.astype(np.float64)).astype(np.float32), "float32(float64 exp(x)) (no node)"
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32).astype(np.int64))
    lines = [f"numpy {np.__version__} float32 exp vs {what}, {n} inputs:"]
    for lo, hi in ((-20.0, 0.0), (-87.33, -20.0), (-104.0, -87.33)):
        m = (x >= lo) & (x < hi)
        lines.append(f"  [{lo}, {hi}): {np.count_nonzero(ulps[m])} of {np.count_nonzero(m)} differ")
    counts = ", ".join(f"{k} ulp: {np.count_nonzero(ulps == k)}" for k in range(1, int(ulps.max()) + 1))
    lines.append(f"  all: {np.count_nonzero(ulps)} of {n} differ ({np.count_nonzero(ulps) / n:.1%}); {counts}")
    if not np.array_equal(theirs, np.exp(x.astype(np.float64)).astype(np.float32)):
        lines.append("  (node's Math.exp differs from float32(float64 exp) on some: the draws below use the latter)")
    return "\n".join(lines)


def draw_differences(draws: int, seed: int = 0) -> str:
    """How often a draw (`inverse_cdf`) picks another token with numpy's float32 exp than with
    float32(float64 exp) (Math.fround(Math.exp)'s), `draws` uniforms on each of three rows of
    151,936 scores: the `random` recipe at temperatures 1 and 0.7, and normal(0, 3) logits."""
    recipe = recipe_scores(_recipe(14, 151936, "random"))
    logits = np.random.default_rng(seed).normal(0, 3, 151936).astype(np.float32)
    rows = [(recipe, 1.0, "random recipe, T = 1"), (recipe, 0.7, "random recipe, T = 0.7"),
            (logits, 1.0, "normal(0, 3) logits, T = 1")]  # fmt: skip
    lines = [f"draws that pick another token, {draws} uniforms a row of 151,936:"]
    for scores, t, what in rows:
        with np.errstate(over="ignore"):
            scaled = scores if t == 1.0 else scores / np.float32(t)
            d = scaled - scaled.max()
        ours, theirs = np.exp(d), np.exp(d.astype(np.float64)).astype(np.float32)
        uniforms = device_rng(seed + 1).random(draws)
        differ = sum(inverse_cdf(ours, float(u)) != inverse_cdf(theirs, float(u)) for u in uniforms)
        lines.append(f"  {what}: {differ} of {draws}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    prog = "python -m tools.conformance.draws"
    parser = Parser(prog=prog, description="measure numpy's float32 exp against Math.fround(Math.exp), and its draws")
    parser.add_argument(
        "--exp-ulp", type=int, metavar="N", nargs="?", const=4_000_000, default=4_000_000,
        help="how many exp inputs to compare (4,000,000)",
    )  # fmt: skip
    parser.add_argument(
        "--draws", type=int, metavar="N", default=10_000,
        help="how many draws to compare on each of three 151,936-entry rows (10,000; 0: none)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    def run() -> int:
        print(exp_ulp(args.exp_ulp))
        if args.draws:
            print(draw_differences(args.draws))
        return EXIT_OK

    return reported(prog, run)


if __name__ == "__main__":
    sys.exit(main())
