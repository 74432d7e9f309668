"""A live verify round, as the server runs it, against its two blocks timed alone.

    python -m bench.cloud_round --specialist S --generalist G [--device cuda --dtype bfloat16] [--kv slots]
        [--methods specsteer,fusion,sd] [--sampling] [--draft-len 4] [--rounds 40] [--out docs/results]

Issue 27 holds a verify round (both cloud blocks and the steering math) to 1.15x of its blocks
timed alone. `bench.gpu` times that round as a replay with the round's math inside the graph; the
verifier runs its own session code instead (`CloudSession.round_frame`: the contract's checks,
both models' forwards through the session's sequences, the log-softmax, the ratio test, the
steering). This times that code on one session with nothing else running (no gRPC, no device
beside it), each round's frame built before its clock starts, and beside it the Generalist's and
the generic Specialist's K+1-token blocks alone (`bench.speed_timing`: through the slot pool
with `--kv slots`). Drafts are ordinary text tokens (the prompt's, cycled), so what a round costs
does not depend on a model's acceptance. Writes OUT/TAG.{json,md}.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import itertools
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Generator, Sequence
from itertools import cycle
from pathlib import Path
from typing import Any

import torch

from bench.results import write_results
from bench.speed_timing import bare_forward_time, pool_forward_times
from bench.timing import synchronize
from specsteer.core.cli import command_parser, reported, whole_number
from specsteer.core.kv import model_device
from specsteer.core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.core.session_types import Method, SessionParams, SteeringVector
from specsteer.server.session import CloudSession, CloudVerifier, reads_generic_specialist
from specsteer.server.slot_sequence import SlotPools

__all__ = ["main", "round_against_blocks", "timed_rounds"]

METHODS = ("specsteer", "fusion", "sd", "llm")  # each with its own block size (fusion, llm: one token)
PROMPT = task_prompt("Why verification pays on a GPU")
CHUNKS = 4  # the rounds and the blocks alone take turns this many times
BLOCK_REPS = 5  # each turn of the blocks alone: a median of this many


def timed_rounds(
    cloud: CloudVerifier, params: SessionParams, profiler: cProfile.Profile | None = None
) -> Generator[float]:
    """Wall seconds of each round of one session, for as long as the caller reads, the session
    reopened whenever its text ends (closed when the caller closes the generator). Each round
    commits the steering's first candidate. `profiler`, if given, runs during the rounds only."""
    s_lm = cloud.specialist
    prompt_ids = s_lm.tokenizer.encode(PROMPT, add_special_tokens=False)
    text = cycle([t for t in prompt_ids if t not in s_lm.eos_ids])
    device = model_device(cloud.generalist.model)
    session: CloudSession | None = None
    commit: list[int] = []
    try:
        while True:
            if session is None or session.closed:
                if session is not None:
                    session.close()  # hands its KV slots back
                session, commit = cloud.open(prompt_ids, params), []
            frame = session.contract.next_frame(commit, [next(text) for _ in range(params.draft_len)], ())
            synchronize(device)
            start = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            verdict = session.round_frame(frame)
            if profiler is not None:
                profiler.disable()
            yield time.perf_counter() - start
            steering = verdict.steering
            commit = list(steering.candidates[0]) if isinstance(steering, SteeringVector) else [next(text)]
    finally:
        if session is not None:
            session.close()


def block_seconds(lm: CausalLM, ids: Sequence[int], n: int, pools: SlotPools | None, reps: int) -> float:
    """An n-token block of `lm` after `ids`, timed alone on the engine the verifier runs (median of `reps`)."""
    if pools is None:
        return bare_forward_time(lm, ids, n, reps)
    return pool_forward_times(pools.pool(lm.model), ids, [n], reps)[n]


def round_against_blocks(
    rounds: Callable[[], Generator[float]], blocks: Callable[[], float], count: int, chunks: int = CHUNKS
) -> tuple[list[float], list[float]]:
    """`count` rounds' seconds and `chunks` timings of the blocks alone, taking turns chunk by
    chunk, so that a drift of this machine's speed during the run (another process, the clock)
    falls on both alike. Each chunk's session is closed before the blocks are timed alone: the
    blocks then run on the pool's first slot, as the session's did (on another, a forward would
    cover the idle slots below it too). Each chunk runs two rounds untimed first."""
    seconds: list[float] = []
    alone: list[float] = []
    for chunk in range(chunks):
        timed = rounds()
        for _ in itertools.islice(timed, 2):
            pass
        seconds += itertools.islice(timed, count * (chunk + 1) // chunks - len(seconds))
        timed.close()
        alone.append(blocks())
    return seconds, alone


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.cloud_round", __doc__.splitlines()[0])
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST, help="the generic Specialist (a model spec or folder)")
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--kv", choices=("dynamic", "slots"), default="dynamic")
    p.add_argument("--methods", default="specsteer,fusion,sd", help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--sampling", action="store_true", help="sampled rounds (sd stays greedy)")
    p.add_argument("--draft-len", type=whole_number(1), default=4)
    p.add_argument("--rounds", type=whole_number(1), default=40)
    p.add_argument(
        "--profile", type=whole_number(1), metavar="N", help="print the N functions each method's rounds spent most in"
    )
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--tag", default="cloud_round")
    args: argparse.Namespace = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or not methods:
        p.error(f"--methods takes {', '.join(METHODS)}; got {args.methods!r}")

    def command() -> int:
        g_lm = load_causal_lm(args.generalist, device=args.device, dtype=args.dtype, progress=False)
        s_lm = load_causal_lm(args.specialist, device=args.device, dtype=args.dtype, progress=False)
        pools = SlotPools(2, 2048) if args.kv == "slots" else None
        if pools is not None:  # on a GPU every graph is captured before a round is timed (elsewhere nothing)
            pools.warm_up([g_lm.model, s_lm.model])
        cloud = CloudVerifier(g_lm, s_lm, seed=0, kv_slots=pools)
        g_ids, s_ids = render_prompt(g_lm, PROMPT), render_prompt(s_lm, PROMPT)

        def blocks(n: int, generic: bool) -> float:
            """A round's blocks alone: P_G's n tokens, and P_S^0's where the method reads it."""
            alone = block_seconds(g_lm, g_ids, n, pools, BLOCK_REPS)
            return alone + (block_seconds(s_lm, s_ids, n, pools, BLOCK_REPS) if generic else 0.0)

        rows: list[dict[str, Any]] = []
        for method in methods:
            drafts = args.draft_len if Method(method) in (Method.SPECSTEER, Method.SD) else 0
            sampled = args.sampling and Method(method) is not Method.SD  # sd verifies greedily only
            steer: dict[str, Any] = {"alpha": 0.0} if Method(method) is Method.LLM else {}  # llm: by P_G alone
            params = SessionParams(method=Method(method), draft_len=drafts, sampling=sampled, **steer)
            # A round feeds the commit and the drafts to P_G, and to P_S^0 where the method reads it.
            n, generic = drafts + 1, reads_generic_specialist(params)
            profiler = cProfile.Profile() if args.profile else None
            seconds, alone = round_against_blocks(
                functools.partial(timed_rounds, cloud, params, profiler),
                functools.partial(blocks, n, generic),
                args.rounds,
            )
            if profiler is not None:
                print(f"--- {method}: the functions its rounds spent most in, own time ---")
                print(_top(profiler, args.profile), flush=True)
            median, blocks_s = statistics.median(seconds), statistics.median(alone)
            rows.append(
                {
                    "method": method,
                    "sampling": sampled,
                    "block_tokens": n,
                    "reads_generic_specialist": generic,
                    "round_median_s": median,
                    "blocks_s": blocks_s,
                    "round_vs_blocks": median / blocks_s,
                    "round_s": seconds,
                    "blocks_alone_s": alone,
                }
            )
        result = {
            "command": "python -m bench.cloud_round " + " ".join(sys.argv[1:] if argv is None else argv),
            "generalist": args.generalist,
            "specialist": args.specialist,
            "device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "this CPU",
            "dtype": args.dtype,
            "kv": args.kv,
            "sampling": args.sampling,
            "draft_len": args.draft_len,
            "rows": rows,
        }
        page = _page(result)
        write_results(args.out, args.tag, result, page)
        print(page)
        return 0

    return reported("bench.cloud_round", command)


def _top(profiler: cProfile.Profile, count: int) -> str:
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(count)
    lines = out.getvalue().splitlines()
    return "\n".join(lines[next((i for i, line in enumerate(lines) if "ncalls" in line), 0) :])


def _page(result: dict[str, Any]) -> str:
    lines = [
        "# A live verify round against its blocks alone",
        "",
        f"`{result['command']}`: Generalist {result['generalist']}, generic Specialist {result['specialist']}, "
        f"{result['device']} in {result['dtype']}, KV engine `{result['kv']}`, "
        f"{'sampled' if result['sampling'] else 'greedy'} rounds (`sd` greedy), K = {result['draft_len']} drafts "
        "where a method drafts, one session.",
        "",
        "| method | tokens a block | models read | round, median ms | its blocks alone, ms | round / blocks |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        models = "P_G, P_S^0" if row["reads_generic_specialist"] else "P_G"
        lines.append(
            f"| {row['method']} | {row['block_tokens']} | {models} | {row['round_median_s'] * 1e3:.2f} | "
            f"{row['blocks_s'] * 1e3:.2f} | {row['round_vs_blocks']:.2f} |"
        )
    lines += [
        "",
        "A round: `CloudSession.round_frame` on a frame built before its clock started (the contract's "
        "checks, the forwards through the session's sequences, log-softmax, ratio test, steering; `fusion` "
        "also encodes its whole vector). Blocks: each model's forward alone on the same engine, "
        f"timed {CHUNKS} times (median of {BLOCK_REPS} each) between the rounds; the median of those.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
