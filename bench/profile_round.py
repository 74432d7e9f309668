"""Where a SpecSteer verify round spends its time, beyond the two cloud models' K+1-token blocks.

    python -m bench.profile_round --specialist smollm2-135m-instruct --generalist /work/models/qwen15.gguf

Runs one in-process generation (device + cloud session on this thread, no network) under
cProfile, then times the floor of a round alone on the same caches: the Generalist's and the
generic Specialist's K+1-token blocks, and K draft steps. Prints the round count, the seconds per
round, the floor, and the cProfile top functions by cumulative and by own time, so the overhead
(everything that is not a model forward) can be read off. Results: docs/results/profile.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from collections.abc import Sequence

import torch

from bench.speed_timing import DEMO, measure_costs
from specsteer.core.models import DEFAULT_SPECIALIST, load_causal_lm
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import SessionParams
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.profile_round", description=__doc__.splitlines()[0])
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", required=True)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--gamma", type=float, default=0.5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--quantize", choices=["fp32", "int8"], default="fp32")
    args = p.parse_args(argv)

    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    profile = Profile.from_obj(demo, source=str(DEMO))
    prompt = task_prompt(demo["queries"][0]["subject"])
    s_lm = load_causal_lm(args.specialist, quantize=args.quantize)
    g_lm = load_causal_lm(args.generalist, quantize=args.quantize)
    specialist = Specialist(s_lm, profile)
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    local = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
    params = SessionParams(gamma=args.gamma)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    generate(specialist, prompt, params, DecodeOptions(max_new_tokens=4), local)  # warm-up

    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    run = generate(specialist, prompt, params, options, local)
    prof.disable()
    seconds = time.perf_counter() - start
    rounds = max(1, run.stats.rounds)
    for key in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(key).print_stats(args.top)
        print(f"--- cProfile by {key} ---")
        print(_trim(out.getvalue()), flush=True)
    k = params.draft_len
    device_ids = specialist.private_prompt_ids(prompt, with_context=True)
    costs = measure_costs(s_lm, g_lm, device_ids, prompt, [1, k + 1])
    floor = costs.verify_block(k)
    print(
        f"torch threads {torch.get_num_threads()}; {run.stats.new_tokens} tokens in {rounds} rounds, "
        f"{seconds:.2f} s; {seconds / rounds * 1000:.0f} ms a round (device drafting and the prefills included)",
        flush=True,
    )
    print(
        f"timed alone: draft step {costs.draft_step * 1000:.0f} ms, Generalist {k + 1}-token block "
        f"{costs.g_block(k + 1) * 1000:.0f} ms, generic Specialist {k + 1}-token block "
        f"{costs.s_block(k + 1) * 1000:.0f} ms; prefills: device {costs.device_prefill * 1000:.0f} ms, "
        f"Generalist {costs.g_prefill * 1000:.0f} ms, generic Specialist {costs.s_prefill * 1000:.0f} ms; "
        f"cloud floor {floor * 1000:.0f} ms; round with K drafts at the floor "
        f"{(floor + k * costs.draft_step) * 1000:.0f} ms"
    )
    return 0


def _trim(text: str) -> str:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if len(sys.argv) > 1 else None))
