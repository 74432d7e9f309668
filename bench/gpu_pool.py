"""bench.gpu's measurements of the lean verify path (`server.slot_pool`): per-session KV slots,
blocks of fixed shape replayed from CUDA graphs, and a whole verify round (both cloud models'
blocks and the steering math) in one replay.

- `measure_pool`: one session's step and blocks of every size, and B sessions x `batch_block`
  tokens in one replay for every B of `batches` (as many slots as the GPU's free memory holds);
  with serving-sized slots (`slot_len`, a server's `kv_max_len`), each forward attends over the
  window the server gives it, and the batches are timed attending over the whole slots too;
- `measure_round`: a verify round of a pair (Generalist + generic Specialist, the ratio inputs and
  every position's top-k steering vector computed in the replay, the kilobytes read back to the
  host) beside the two blocks replayed alone.

Every slot's length is set to the context (the KV's values do not change the time) and each
replay writes the same positions again, which is what a rollback by length costs: nothing.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
from torch._dynamo.utils import counters
from transformers import PreTrainedModel

from bench.timing import median_ms
from specsteer.server.slot_pool import GraphedForward, SlotPool, kv_bytes, round_outputs

ROUND_ALPHA = 1.0
ROUND_TOP_K = 10


def slots_that_fit(model: PreTrainedModel, wanted: int, max_len: int, headroom: float = 0.75) -> int:
    """How many slots of `max_len` positions fit in `headroom` of the GPU's free memory (all
    `wanted` on a CPU), at least 1."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return wanted
    per_slot = kv_bytes(model.config, 1, max_len, next(model.parameters()).dtype)
    # The logits of a replay ([B, n, vocab], and their fp32 log-softmax in a round) take room too.
    per_slot += 10 * model.config.vocab_size * 4 * 3
    free = torch.cuda.mem_get_info(device)[0]
    return max(1, min(wanted, int(headroom * free / per_slot)))


# The pool's paths `measure_pool` can time: transformers' forward or the pool's fused one
# (server.fused_decoder), each replayed from CUDA graphs, plain or compiled by inductor.
POOL_PATHS: dict[str, dict[str, bool]] = {
    "graphs": {"fused": False, "compiled": False},
    "compiled": {"fused": False, "compiled": True},
    "fused": {"fused": True, "compiled": False},
    "fused+compiled": {"fused": True, "compiled": True},
}


def _ready_pool(
    model: PreTrainedModel, slots: int, context: int, max_len: int, *, compiled: bool = False, fused: bool = False
) -> SlotPool:
    pool = SlotPool(model, slots=slots, max_len=max_len, compiled=compiled, fused=fused)
    for _ in range(slots):
        pool.set_length(pool.claim(), context)
    return pool


def _inputs(
    pool: SlotPool, bucket: int, n: int, vocab: int, seed: int, *, whole_slot: bool = False
) -> tuple[torch.Tensor, ...]:
    """A forward's inputs: `bucket` sessions at their lengths, n random tokens each, attending over
    the window a server's forward gets (`SlotPool.graph_window`), or over the whole slots."""
    gen = torch.Generator().manual_seed(seed)
    blocks = {s: torch.randint(0, vocab, (n,), generator=gen).tolist() for s in range(bucket)}
    window = None if whole_slot else pool.graph_window(max(pool.lengths[:bucket]) + n)
    return pool.inputs(blocks, bucket, n, window)


def measure_pool(
    model: PreTrainedModel,
    *,
    context: int,
    blocks: tuple[int, ...],
    batches: tuple[int, ...],
    batch_block: int,
    reps: int,
    path: str = "graphs",
    slot_len: int | None = None,
) -> dict[str, Any]:
    """One session's blocks (n tokens, ms) and B sessions' `batch_block`-token blocks in one replay,
    on one of `POOL_PATHS`; `seconds` includes the captures (and compiles). Slots hold the context
    and the longest block, or `slot_len` positions if more (then `whole_slot_batch_ms` are the
    batches attending over the whole slots, as every forward did before windows)."""
    device, vocab = next(model.parameters()).device, model.config.vocab_size
    max_len = max(context + max((*blocks, batch_block)) + 1, slot_len or 0)
    slots = slots_that_fit(model, max(batches), max_len)
    started = time.perf_counter()
    compiles_before = counters["stats"]["unique_graphs"]
    pool = _ready_pool(model, slots, context, max_len, **POOL_PATHS[path])
    out: dict[str, Any] = {
        "path": path,
        **POOL_PATHS[path],
        "slots": slots,
        "slot_len": max_len,
        "kv_bytes": pool.kv.bytes(),
        "block_ms": {},
        "batch_window": pool.graph_window(context + batch_block),
        "batch_ms": {},
    }
    whole_slot = out["batch_window"] < max_len
    if whole_slot:
        out["whole_slot_batch_ms"] = {}
    for n in blocks:
        inputs = _inputs(pool, 1, n, vocab, seed=300 + n)
        out["block_ms"][str(n)] = round(median_ms(functools.partial(pool.forward_graphs, *inputs), device, reps), 3)
    for b in batches:
        if b > slots:
            out["batch_ms"][str(b)] = f"{b} slots do not fit in the GPU's free memory ({slots} do)"
            continue
        inputs = _inputs(pool, b, batch_block, vocab, seed=400 + b)
        out["batch_ms"][str(b)] = round(median_ms(functools.partial(pool.forward_graphs, *inputs), device, reps), 3)
        if whole_slot:
            inputs = _inputs(pool, b, batch_block, vocab, seed=400 + b, whole_slot=True)
            ms = median_ms(functools.partial(pool.forward_graphs, *inputs), device, reps)
            out["whole_slot_batch_ms"][str(b)] = round(ms, 3)
    out["seconds"] = round(time.perf_counter() - started, 1)  # compiles included
    out["compiled_graphs"] = counters["stats"]["unique_graphs"] - compiles_before  # 0: nothing compiled
    one = out["batch_ms"].get("1")
    if isinstance(one, float):
        out["batch_throughput_vs_one"] = {
            b: round(int(b) * one / ms, 2) for b, ms in out["batch_ms"].items() if isinstance(ms, float)
        }
    return out


def measure_round(
    g_model: PreTrainedModel,
    s0_model: PreTrainedModel,
    *,
    context: int,
    n: int,
    batches: tuple[int, ...],
    reps: int,
    fused: bool = False,
) -> dict[str, Any]:
    """For each B: one replay of a whole verify round (both blocks, `round_outputs`, read back to the
    host) against the Generalist's and the generic Specialist's blocks replayed alone."""
    device = next(g_model.parameters()).device
    vocab = min(g_model.config.vocab_size, s0_model.config.vocab_size)
    wanted, max_len = max(batches), context + n + 1
    slots = min(slots_that_fit(g_model, wanted, max_len), slots_that_fit(s0_model, wanted, max_len))
    g_pool = _ready_pool(g_model, slots, context, max_len, fused=fused)
    s0_pool = _ready_pool(s0_model, slots, context, max_len, fused=fused)

    def whole_round(*inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        ids = inputs[0]
        g_logits, s0_logits = g_pool.block(*inputs), s0_pool.block(*inputs)
        return round_outputs(g_logits, s0_logits, ids, alpha=ROUND_ALPHA, k=ROUND_TOP_K)

    graphed = GraphedForward(whole_round, device)
    out: dict[str, Any] = {"slots": slots, "n": n, "fused": fused, "alpha": ROUND_ALPHA, "top_k": ROUND_TOP_K}
    out["by_batch"] = {}
    for b in batches:
        if b > slots:
            out["by_batch"][str(b)] = f"{b} slots do not fit in the GPU's free memory ({slots} do)"
            continue
        inputs = _inputs(g_pool, b, n, vocab, seed=500 + b)

        def run(inputs: tuple[torch.Tensor, ...] = inputs) -> None:
            numbers = graphed(*inputs)
            {name: t.cpu() for name, t in numbers.items()}  # the kilobytes the host decides on

        round_ms = median_ms(run, device, reps)
        g_ms = median_ms(functools.partial(g_pool.forward_graphs, *inputs), device, reps)
        s0_ms = median_ms(functools.partial(s0_pool.forward_graphs, *inputs), device, reps)
        out["by_batch"][str(b)] = {
            "round_ms": round(round_ms, 3),
            "generalist_block_ms": round(g_ms, 3),
            "specialist_block_ms": round(s0_ms, 3),
            "round_vs_blocks": round(round_ms / (g_ms + s0_ms), 3),
            "read_back_bytes": b * ((n - 1) * 4 + n * 8 + n * ROUND_TOP_K * (8 + 4)),
        }
    return out
