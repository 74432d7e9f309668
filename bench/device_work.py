"""What the device does in a round besides its forwards, each part timed alone.

    python -m bench.device_work [--specialist NAME] [--sampling] [--out docs/results]

A round costs the device more than its draft steps. Each drafted token is drawn from a whole row
(`core.recovery.choose`: an argmax, or when sampling a two-level inverse CDF over the vocabulary).
The egress guard decodes and scans what a round is about to send: once a round, and again for
each token it drafts ahead to resolve a hold. `fusion` decodes the cloud's dense vector and fuses
it with the device's own row before its draw. The cost model (`bench.cost_model`) prices each of
these as measured here.

Without them the model saw only forwards and the RTT. Beside a fast cloud on this CPU that left
6.3 ms of a 55.9 ms `specsteer` round and 8.2 ms of a `fusion` token unaccounted for
(docs/results/speed_fast_cloud_cpu.md). On a GPU, where the cloud's blocks take a few ms, such
terms weigh more than they do here.

Everything is timed on the device's own text: the device's Specialist writes `--tokens` tokens
after the demo user's private prompt, drawn as the run draws them (sampled or greedy). Each part is
timed on that text, with these inputs:
- a draw: the row after that text;
- a guard check: K + 1 tokens (the pending recovery and a K-token draft) after each round's worth
  of that text, with the guard the client builds by default for the demo user;
- fusion's work: decoding a downlink that carries the row after the text as its vector, and the
  fused draw.

`bench.speed` times the same parts before each RTT's rows; this command writes them on their own
(OUT/device_work.json and .md) for `bench.gpu_projection --device-work`, which projects the
paper's pair with this device's costs.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.results import write_results
from bench.speed_timing import DEMO
from bench.timing import median_ms
from specsteer.core import wire
from specsteer.core.cli import command_parser, reported, whole_number
from specsteer.core.limits import WIRE_MAX_TOP_K
from specsteer.core.models import DEFAULT_SPECIALIST, load_causal_lm
from specsteer.core.prompts import task_prompt
from specsteer.core.recovery import choose, device_rng, recovery_scores
from specsteer.core.session_types import FusionVector, SessionParams, Verdict
from specsteer.privacy.guard import EgressGuard
from specsteer.sdk.client import ClientConfig
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import Specialist
from specsteer.sdk.uplink_guard import guard_setting

__all__ = ["DeviceText", "DeviceWork", "device_text", "device_work_times", "main"]

CPU = torch.device("cpu")  # the device's work runs on its CPU


@dataclass(frozen=True)
class DeviceText:
    """The device's own continuation of a prompt, and its row after the last token."""

    prompt: str
    tokens: list[int]
    row: np.ndarray


@dataclass(frozen=True)
class DeviceWork:
    """Seconds, each the median of its timings (the fields of `bench.cost_model.Costs` they fill):
    choosing one token from a whole row greedily (an argmax) and by a sampled draw; one check of a
    round's uplink (0 without a guard); fusion's decoding of a dense downlink and its fused choice."""

    greedy_pick: float
    sampled_draw: float
    guard_check: float
    fuse: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def device_text(specialist: Specialist, prompt: str, tokens: int, *, sampling: bool, seed: int = 0) -> DeviceText:
    """`tokens` tokens the device's Specialist writes after its private prompt for `prompt`
    (retrieved examples included), drawn as a generation in that mode draws them."""
    seq = specialist.sequence(specialist.private_prompt_ids(prompt, with_context=True))
    rng = device_rng(seed)
    out: list[int] = []
    for _ in range(tokens):
        token = choose(seq.next_logprobs(), sampling=sampling, generator=rng)
        out.append(token)
        seq.push([token])
    return DeviceText(prompt, out, np.asarray(seq.next_logprobs(), dtype=np.float32))


def device_work_times(
    text: DeviceText,
    *,
    sampling: bool,
    guard: EgressGuard | None,
    tokenizer: Any,
    draft_len: int,
    alpha: float = SessionParams().alpha,
    reps: int = 20,
) -> DeviceWork:
    """Each part of a round's device work on `text` (see the module docstring), timed alone;
    fusion's choice in the mode `sampling` says."""
    rng = device_rng(1)
    greedy = _median(lambda: choose(text.row, sampling=False), reps)
    sampled = _median(lambda: choose(text.row, sampling=True, generator=rng), reps)
    check = 0.0
    if guard is not None:
        session_guard = guard.for_prompt(text.prompt)
        block = draft_len + 1  # the pending recovery and the draft
        starts = range(0, max(1, len(text.tokens) - block + 1), block)
        times = []
        for _ in range(max(1, reps // len(starts))):
            for i in starts:
                new = text.tokens[i : i + block]
                times.append(_seconds(partial(session_guard.check, text.tokens[:i], new, tokenizer, send=len(new))))
        check = statistics.median(times)
    downlink = wire.encode_downlink(1, Verdict(0, FusionVector(text.row.astype("<f4").tobytes())))
    vocab = len(text.row)

    def fuse() -> int:
        _, verdict = wire.decode_downlink(downlink, max_top_k=WIRE_MAX_TOP_K, vocab_size=vocab, fusion=True)
        assert isinstance(verdict.steering, FusionVector)
        values = np.frombuffer(verdict.steering.values, dtype="<f4").astype(np.float32)
        return choose(recovery_scores(values, text.row, alpha), sampling=sampling, generator=rng)

    return DeviceWork(greedy_pick=greedy, sampled_draw=sampled, guard_check=check, fuse=_median(fuse, reps))


def _seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _median(run: Callable[[], object], reps: int) -> float:
    """`bench.timing.median_ms` on the CPU, in seconds."""
    return median_ms(run, CPU, reps) / 1e3


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.device_work", __doc__.splitlines()[0])
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST, help="the device's Specialist (default: shipped)")
    p.add_argument("--sampling", action="store_true", help="fusion's choice sampled (default: greedy)")
    p.add_argument("--draft-len", type=whole_number(1), default=SessionParams().draft_len, help="K")
    p.add_argument("--tokens", type=whole_number(1), default=64, help="tokens of the device's own text")
    p.add_argument("--reps", type=whole_number(1), default=50)
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    args = p.parse_args(argv)

    def command() -> int:
        demo = json.loads(DEMO.read_text(encoding="utf-8"))
        profile = Profile.from_obj(demo, source=str(DEMO))
        lm = load_causal_lm(args.specialist)
        specialist = Specialist(lm, profile)
        guard = guard_setting(profile, lm.tokenizer, ClientConfig.guard)
        text = device_text(specialist, task_prompt(demo["queries"][0]["subject"]), args.tokens, sampling=args.sampling)
        work = device_work_times(
            text, sampling=args.sampling, guard=guard, tokenizer=lm.tokenizer, draft_len=args.draft_len, reps=args.reps
        )
        result = {
            "command": "python -m bench.device_work " + " ".join(sys.argv[1:] if argv is None else argv),
            "specialist": args.specialist,
            "sampling": args.sampling,
            "draft_len": args.draft_len,
            "tokens": args.tokens,
            "vocab": len(text.row),
            "guard": ClientConfig.guard,
            "seconds": work.as_dict(),
        }
        write_results(args.out, "device_work", result, page(result))
        print(page(result), end="")
        return 0

    return reported("bench.device_work", command)


def page(result: dict[str, Any]) -> str:
    ms = {k: v * 1e3 for k, v in result["seconds"].items()}
    mode = "sampled" if result["sampling"] else "greedy"
    return (
        f"# The device's work around its forwards: {result['specialist']}\n\n"
        f"`{result['command']}`: {result['tokens']} tokens of the device's own text (drawn {mode}), "
        f"{result['vocab']} entries a row, the client's default guard ({result['guard']}), K = "
        f"{result['draft_len']}; medians, each part timed alone.\n\n"
        "| part | ms |\n|---|---|\n"
        f"| a greedy pick (argmax) from a whole row (each drafted or looked-ahead token) | {ms['greedy_pick']:.3f} |\n"
        f"| a sampled draw from a whole row (the same, sampling) | {ms['sampled_draw']:.3f} |\n"
        f"| a check of the egress guard (once a round, again per look-ahead token) | {ms['guard_check']:.3f} |\n"
        f"| fusion: decoding the dense downlink and the fused choice, {mode} (once a token) | {ms['fuse']:.3f} |\n"
    )


if __name__ == "__main__":
    sys.exit(main())
