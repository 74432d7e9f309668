"""A prompt's prefill, computing the distribution after its last token only against after every token.

    python -m bench.prefill_rows [--model NAME] [--kv dynamic|slots] [--reps 3] [--out docs/results]

The device prefills its private prompt (the demo user's retrieved examples included: 657 tokens
with the default Specialist) before a session opens, and the verifier prefills each cloud model's
public prompt at Open. `CachedSequence.rows_wanted` has a prefill compute its last row only; before
it, the LM head ran at every prompt position and every row was log-softmaxed and kept, though no
rollback ever goes behind the prompt. This times both, taking turns in one process (median of
`--reps`), and measures the resident memory each one adds in a fresh process of its own (the
model loaded and a 16-token forward run, then one prefill): at its peak, and held while its
sequence lives. Writes OUT/prefill_rows.{json,md}.

`--kv slots` times the verifier's slot pool (`server serve --kv slots`) instead, on the same prompt:
`SlotPool.run` computing the LM head over the prefill's last row only, against over every row
(as it did before), both keeping the last; it writes OUT/prefill_rows_slots.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.results import write_results
from bench.speed_timing import demo_device_ids
from specsteer.core.cli import command_parser, reported, whole_number
from specsteer.core.kv import TokenSequence
from specsteer.core.models import DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from specsteer.server.fused_decoder import fused_decoder_problem
from specsteer.server.slot_pool import SlotPool

__all__ = ["ENGINES", "KINDS", "EveryRowSequence", "main", "prefill_memory", "prefills"]


class EveryRowSequence(TokenSequence):
    """The baseline: every forward computes and keeps a row per fed token, as before
    `rows_wanted` (a prefill's rows for every prompt position)."""

    def rows_wanted(self) -> int:
        return len(self.ids) - self.cached


KINDS = ("last-row", "every-row")
ENGINES = ("dynamic", "slots")
Prefill = Callable[[list[int]], Any]  # prefills its ids and returns what a session holds after


def prefills(lm: CausalLM, engine: str, max_len: int) -> dict[str, Prefill]:
    """Each kind's prefill on `engine`: a sequence of its own (`dynamic`), or slot 0 of a one-slot
    pool of `max_len` positions, emptied first (`slots`)."""
    if engine == "dynamic":

        def sequence(kind: type[TokenSequence]) -> Prefill:
            def prefill(ids: list[int]) -> TokenSequence:
                seq = kind(lm.model, ids)
                seq.next_logprobs()
                return seq

            return prefill

        return {"last-row": sequence(TokenSequence), "every-row": sequence(EveryRowSequence)}
    pool = SlotPool(lm.model, 1, max_len, fused=fused_decoder_problem(lm.model.config) is None)
    slot = pool.claim()

    def last_row(ids: list[int]) -> list[Any]:
        pool.set_length(slot, 0)
        return pool.run({slot: ids}, {slot: 1})

    def every_row(ids: list[int]) -> list[Any]:  # as `SlotPool.run` did before it skipped unread rows
        pool.set_length(slot, 0)
        logits = pool.forward({slot: ids}, 1, len(ids), len(ids), graphed=False)
        return [logits[slot, -1:].clone()]

    return {"last-row": last_row, "every-row": every_row}


def _device_prompt(model: str) -> tuple[CausalLM, list[int]]:
    lm = load_causal_lm(model, progress=False)
    return lm, demo_device_ids(lm)


def _prefill_seconds(prefill: Prefill, ids: list[int]) -> float:
    start = time.perf_counter()
    prefill(ids)
    return time.perf_counter() - start


def _rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def prefill_memory(model: str, kind: str, engine: str = "dynamic") -> dict[str, float]:
    """Resident memory a prefill of `kind` adds, in MiB, in this process (run it in a fresh one):
    the peak while it runs (sampled every millisecond) and what stays while its sequence lives
    (a kept row is a view that holds the whole log-softmaxed block alive)."""
    lm, ids = _device_prompt(model)
    prefill = prefills(lm, engine, len(ids))[kind]
    prefill(ids[:16])  # the first forward's one-off allocations (kernels' packed weights)
    before, peak, running = _rss_mib(), [0.0], threading.Event()
    running.set()

    def sample() -> None:
        while running.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seq = prefill(ids)
    running.clear()
    sampler.join()
    held = _rss_mib() - before
    del seq
    return {"peak_mib": max(peak[0], _rss_mib()) - before, "held_mib": held}


def _memory(model: str, kind: str, engine: str) -> dict[str, float]:
    code = (
        "import json; from bench.prefill_rows import prefill_memory; "
        f"print(json.dumps(prefill_memory({model!r}, {kind!r}, {engine!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.prefill_rows", __doc__.splitlines()[0])
    p.add_argument("--model", default=DEFAULT_SPECIALIST, help="a model spec (default: the device's Specialist)")
    p.add_argument(
        "--kv", choices=ENGINES, default="dynamic", help="the KV engine: a session's own cache, or the slot pool"
    )
    p.add_argument("--reps", type=whole_number(1), default=3)
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    args: argparse.Namespace = p.parse_args(argv)

    def command() -> int:
        lm, ids = _device_prompt(args.model)
        runs = prefills(lm, args.kv, len(ids))
        for kind in KINDS:  # warm-up
            _prefill_seconds(runs[kind], ids)
        seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(args.reps):
            for kind in KINDS:
                seconds[kind].append(_prefill_seconds(runs[kind], ids))
        result = {
            "command": "python -m bench.prefill_rows " + " ".join(sys.argv[1:] if argv is None else argv),
            "model": args.model,
            "kv": args.kv,
            "prompt_tokens": len(ids),
            "vocab": lm.vocab_size,
            "reps": args.reps,
            "median_s": {kind: statistics.median(s) for kind, s in seconds.items()},
            "seconds": seconds,
            "memory_mib": {kind: _memory(args.model, kind, args.kv) for kind in KINDS},
        }
        med, mem = result["median_s"], result["memory_mib"]
        ratio = med["last-row"] / med["every-row"]
        page = "\n".join(
            [
                "# A prompt's prefill: its last row only, against a row per prompt token",
                "",
                f"`{result['command']}`: {args.model}, the demo user's device prompt ({len(ids)} tokens, "
                f"retrieved examples included), vocabulary {result['vocab']}, this CPU in float32, "
                + ("a session's own cache." if args.kv == "dynamic" else "the verifier's slot pool (`SlotPool.run`)."),
                "",
                "| prefill computes | median s | resident memory added: peak, MiB | held after, MiB |",
                "|---|---|---|---|",
                *(f"| {k} | {med[k]:.2f} | {mem[k]['peak_mib']:.0f} | {mem[k]['held_mib']:.0f} |" for k in KINDS),
                "",
                f"Last row only: {ratio:.2f}x the time of every row. Memory from a fresh process each (the "
                "model loaded, a 16-token forward, then one prefill, its resident set sampled every "
                "millisecond): the peak while it ran, and what stayed while its sequence lived.",
                "",
            ]
        )
        write_results(args.out, "prefill_rows" if args.kv == "dynamic" else "prefill_rows_slots", result, page)
        print(page)
        return 0

    return reported("bench.prefill_rows", command)


if __name__ == "__main__":
    sys.exit(main())
