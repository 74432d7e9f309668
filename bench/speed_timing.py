"""What the speed benchmark times alone: bare forwards and prefills of each model, the device's draft step.

Every cost is the median of a few repetitions after one that warms the allocator, on the demo
user's prompts (`DEMO`), so the cost model (`bench.cost_model`) reads this machine's forwards and
nothing else. The device's draft step and prefill are timed through the device's own sequence,
whichever runtime drafts (torch's `TokenSequence` too): a forward and the log-softmax of the row it
reads, what each drafted token costs the device.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from bench.cost_model import Costs
from bench.timing import median_ms
from specsteer.core.kv import CachedSequence, TokenSequence, model_device, recording_cache
from specsteer.core.models import CausalLM
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import Drafter, Specialist
from specsteer.server.slot_pool import SlotPool
from specsteer.server.slot_sequence import SlotPools

__all__ = [
    "DEMO",
    "bare_forward_time",
    "bare_prefill_time",
    "demo_device_ids",
    "drafter_times",
    "logger",
    "measure_costs",
    "pool_forward_times",
    "sequence_times",
    "torch_drafter_times",
]

DEMO = Path(__file__).resolve().parents[1] / "sdk" / "data" / "demo_profile.json"


def demo_device_ids(lm: CausalLM) -> list[int]:
    """The device's private prompt for the demo user's first query, its retrieved examples
    included: what the device prefills before it opens a session."""
    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    specialist = Specialist(lm, Profile.from_obj(demo, source=str(DEMO)))
    return specialist.private_prompt_ids(task_prompt(demo["queries"][0]["subject"]), with_context=True)


def bare_forward_time(lm: CausalLM, ids: Sequence[int], block: int, reps: int = 5) -> float:
    """Median seconds of one bare forward of `block` tokens on a warm KV cache of `ids` (the model
    alone: no log-softmax, no bookkeeping), rolled back before each rep so the context stays put."""
    ids, device = list(ids), model_device(lm.model)
    cache = recording_cache(lm.model)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids], device=device), past_key_values=cache, use_cache=True)
        tokens = torch.tensor([(ids * (block // len(ids) + 1))[-block:]], device=device)  # ordinary text tokens
        forward = functools.partial(lm.model, input_ids=tokens, past_key_values=cache, use_cache=True)

        def rollback() -> None:
            if cache.get_seq_length() > len(ids):
                cache.crop(len(ids) - cache.get_seq_length())  # a negative count: tokens to remove

        return median_ms(forward, device, reps, reset=rollback) / 1e3


def pool_forward_times(pool: SlotPool, ids: Sequence[int], blocks: Sequence[int], reps: int = 5) -> dict[int, float]:
    """The slot pool's counterpart of `bare_prefill_time` (key 0) and `bare_forward_time` (each of
    `blocks`): median seconds of a forward of `ids` into an empty slot, and of an n-token block on a
    slot holding `ids`, through `pool.run`, the shape and graph a session's round gets (padded to a
    power of two on a GPU, replayed from its CUDA graph), rolled back by length before each rep. A
    verifier on the slot pool pays these, not transformers' eager forwards."""
    ids, out = list(ids), {}
    slot = pool.claim()
    try:
        for n in (0, *blocks):  # the prefill first: it leaves the slot holding `ids` for the blocks
            tokens = ids if n == 0 else (ids * (n // len(ids) + 1))[-n:]
            rollback = functools.partial(pool.set_length, slot, 0 if n == 0 else len(ids))
            # The warm-ups capture the graph (or warm the allocator).
            keep = {slot: 1} if n == 0 else None  # a prefill hands back its last row, as a session's does
            run = functools.partial(pool.run, {slot: tokens}, keep)
            out[n] = median_ms(run, pool.device, reps, reset=rollback) / 1e3
    finally:
        pool.release(slot)
    return out


def bare_prefill_time(lm: CausalLM, ids: Sequence[int], reps: int = 3) -> float:
    """Median seconds of one bare forward of all of `ids` on an empty KV cache (a prompt's prefill:
    the LM head at its last position only, as a sequence's prefill computes it)."""
    device = model_device(lm.model)
    tokens = torch.tensor([list(ids)], device=device)
    cache = recording_cache(lm.model)

    def empty_cache() -> None:
        nonlocal cache
        cache = recording_cache(lm.model)

    def prefill() -> None:
        lm.model(input_ids=tokens, past_key_values=cache, use_cache=True, logits_to_keep=1)

    with torch.inference_mode():
        return median_ms(prefill, device, reps, reset=empty_cache) / 1e3


def drafter_times(drafter: Drafter, ids: Sequence[int], reps: int = 5) -> tuple[float, float]:
    """Median seconds of the device drafter's step on a warm cache of `ids`, and of its prefill of
    `ids`, through its own sequences (with the log-softmax the device reads, ~1 ms)."""
    return sequence_times(drafter.sequence, ids, reps)


def torch_drafter_times(lm: CausalLM, ids: Sequence[int], reps: int = 5) -> tuple[float, float]:
    """`drafter_times` for the device's default runtime, the Specialist on torch (`TokenSequence`):
    what its draft step and prefill cost the device, the log-softmax of the row it reads included,
    as for every other runtime (a bare forward leaves that out: 0.3 ms or more a step for a 152k
    vocabulary on this CPU, where the cloud's blocks on a GPU take a few ms)."""
    return sequence_times(lambda prefix: TokenSequence(lm.model, prefix), ids, reps)


def sequence_times(
    make: Callable[[Sequence[int]], CachedSequence[Any]], ids: Sequence[int], reps: int = 5
) -> tuple[float, float]:
    """Median seconds of a step on a warm cache of `ids` and of the prefill of `ids`, through
    sequences `make(ids)` makes."""
    prefills, steps = [], []
    for _ in range(3 + 1):
        seq = make(ids)
        start = time.perf_counter()
        seq.next_logprobs()
        prefills.append(time.perf_counter() - start)
    for _ in range(reps + 1):
        seq.push(ids[-1:])
        start = time.perf_counter()
        seq.next_logprobs()
        steps.append(time.perf_counter() - start)
        seq.truncate(len(ids))
    return statistics.median(steps[1:]), statistics.median(prefills[1:])


def measure_costs(
    s_lm: CausalLM,
    g_lm: CausalLM,
    device_ids: Sequence[int],
    prompt: str,
    sizes: Sequence[int],
    reps: int = 5,
    drafter: Drafter | None = None,
    cloud_s: CausalLM | None = None,
    kv_slots: SlotPools | None = None,
) -> Costs:
    """Every cost the model uses, timed alone: `device_ids` is the device's private prompt, `prompt`
    the public one the cloud renders for each of its models. The device's costs are its `drafter`'s
    when it has one; the generic Specialist's are `cloud_s`'s when the cloud has its own copy (on
    another device or dtype), else `s_lm`'s. With `kv_slots` (the verifier's slot pools), the
    cloud's blocks and prefills are timed through those pools (`pool_forward_times`)."""
    g_ids, s_ids = render_prompt(g_lm, prompt), render_prompt(s_lm, prompt)
    s0_lm = cloud_s if cloud_s is not None else s_lm
    if drafter is None:
        draft_step, device_prefill = torch_drafter_times(s_lm, device_ids, reps)
    else:
        draft_step, device_prefill = drafter_times(drafter, device_ids, reps)
    if kv_slots is not None:
        g = pool_forward_times(kv_slots.pool(g_lm.model), g_ids, list(sizes), reps)
        s = pool_forward_times(kv_slots.pool(s0_lm.model), s_ids, list(sizes), reps)
        return Costs(
            draft_step=draft_step,
            g_blocks={n: g[n] for n in sizes},
            s_blocks={n: s[n] for n in sizes},
            device_prefill=device_prefill,
            g_prefill=g[0],
            s_prefill=s[0],
        )
    return Costs(
        draft_step=draft_step,
        g_blocks={n: bare_forward_time(g_lm, g_ids, n, reps) for n in sizes},
        s_blocks={n: bare_forward_time(s0_lm, s_ids, n, reps) for n in sizes},
        device_prefill=device_prefill,
        g_prefill=bare_prefill_time(g_lm, g_ids),
        s_prefill=bare_prefill_time(s0_lm, s_ids),
    )


def logger() -> Callable[[str], None]:
    """A progress log: each line stamped with the seconds since the log was made."""
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True)

    return log
