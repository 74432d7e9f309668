"""The device's sampled draw over a vocabulary: two levels (`core.recovery.choose`) against one
cumulative sum over every entry, as it was.

    python -m bench.sampling_draw [--vocab 151936] [--draws 500] [--out docs/results]

Every token the device writes in sampling mode (each draft, recovery and steered bonus) is one draw
from softmax(scores / T) over the vocabulary, by inverting its cumulative distribution at one
uniform. This times both ways, taking turns in one process, on rows of random log-probabilities
of the given size, checks that they draw the same tokens, and writes OUT/sampling_draw.{json,md}.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.results import write_results
from specsteer.core.cli import command_parser, reported, whole_number
from specsteer.core.recovery import DRAW_BLOCK, choose, device_rng

__all__ = ["main", "whole_vocabulary_draw"]


def whole_vocabulary_draw(scores: np.ndarray, generator: np.random.Generator) -> int:
    """The baseline: one float64 cumulative sum over every entry (the draw before `DRAW_BLOCK`)."""
    logits = np.asarray(scores, dtype=np.float32).astype(np.float64)
    cumulative = np.cumsum(np.exp(logits - logits.max()))
    u = generator.random() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(cumulative) - 1))


def two_level_draw(scores: np.ndarray, generator: np.random.Generator) -> int:
    return choose(scores, sampling=True, generator=generator)


def _time_ms(draw: Callable[[np.ndarray, np.random.Generator], int], rows: list[np.ndarray]) -> list[float]:
    out = []
    for seed, row in enumerate(rows):
        generator = device_rng(seed)
        start = time.perf_counter()
        draw(row, generator)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.sampling_draw", __doc__.splitlines()[0])
    p.add_argument("--vocab", type=whole_number(1), default=151_936, help="entries a row (Qwen's 151,936)")
    p.add_argument("--draws", type=whole_number(1), default=500)
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    args = p.parse_args(argv)

    def command() -> int:
        rng = np.random.default_rng(0)
        rows = [(rng.standard_normal(args.vocab) * 3).astype(np.float32) for _ in range(min(args.draws, 50))]
        rows = [rows[i % len(rows)] for i in range(args.draws)]
        ways = {"whole-vocabulary": whole_vocabulary_draw, "two-level": two_level_draw}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(2):  # taking turns, twice; the first turn warms the allocator
            for name, draw in ways.items():
                times[name] = _time_ms(draw, rows)
        same = sum(
            whole_vocabulary_draw(row, device_rng(seed)) == two_level_draw(row, device_rng(seed))
            for seed, row in enumerate(rows)
        )
        median = {name: statistics.median(t) for name, t in times.items()}
        result = {
            "command": "python -m bench.sampling_draw " + " ".join(sys.argv[1:] if argv is None else argv),
            "vocab": args.vocab,
            "draws": args.draws,
            "block": DRAW_BLOCK,
            "median_ms": median,
            "same_tokens": same,
        }
        ratio = median["two-level"] / median["whole-vocabulary"]
        page = "\n".join(
            [
                "# The device's sampled draw: two levels against one cumulative sum over the vocabulary",
                "",
                f"`{result['command']}`: {args.draws} draws from rows of {args.vocab} random log-probabilities, "
                "both ways taking turns in one process (the second turn timed), this CPU.",
                "",
                "| draw | median ms |",
                "|---|---|",
                *(f"| {name} | {ms:.3f} |" for name, ms in median.items()),
                "",
                f"Two levels ({DRAW_BLOCK}-entry blocks): {ratio:.2f}x the time of the whole-vocabulary draw; "
                f"the same token in {same} of {args.draws} draws (seeded alike).",
                "",
            ]
        )
        write_results(args.out, "sampling_draw", result, page)
        print(page)
        return 0

    return reported("bench.sampling_draw", command)


if __name__ == "__main__":
    sys.exit(main())
