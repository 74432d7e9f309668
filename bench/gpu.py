"""The verifier's forwards on a GPU, each beside its memory-bandwidth floor: random-weight models of
the real configurations, bf16, one KV context.

    python -m bench.gpu --device cuda --compile --out docs/results      # the GPU machine
    python -m bench.gpu --device cpu --configs tiny --reps 3 --out /tmp/x  # a CI smoke run, seconds

For each configuration (`CONFIGS`: the sizes of the released models' config.json; a dense
transformer's speed does not depend on its weight values, so the weights are random, built on the
device itself) and a KV context of `--context` tokens (512):
- eager transformers (`DynamicCache`): the 1-token step and every verify block of 1..9 tokens;
- transformers' `StaticCache` under `torch.compile(mode="reduce-overhead")` (CUDA graphs; without
  `--compile` the same path runs uncompiled): the blocks of `--compiled-blocks` (1 and 5), the cache
  rewound after each by writing its length counter in place, as a rejected draft would be; the
  logits are held to the eager path's on the same input (`static_vs_eager_max_abs_diff`);
- batched verify: 1/8/32/64 sessions x 5 tokens in one eager forward, and its verified tokens/s
  against one session's;
- the lean path (`bench.gpu_pool`, unless `--no-pool`): the slot pool replayed from CUDA graphs on
  each of `--pool-paths` (transformers' forward, the pool's fused forward, either compiled; a
  compiled path only for `--compile-configs` and with `--compile-min-s` left), one session's blocks
  and B sessions in one replay, and for a Generalist of `PAIRS` a whole verify round.
Every time is the median of `--reps` (after warm-up) beside its floor: the weights' and the KV
cache's bytes read, over the device-to-device copy rate measured in the same run (a large
`Tensor.copy_`, bytes read and written both counted).

The run keeps to `--deadline-s`: configurations are measured smallest first, JSON is rewritten after
each, and one whose compile would not fit the time left is measured eager only (and one that would
not fit at all, or not fit in the GPU's memory, is recorded as skipped, with the reason).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    DynamicCache,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
    StaticCache,
)

from bench.gpu_pool import POOL_PATHS, measure_pool, measure_round
from bench.results import write_results
from bench.timing import median_ms
from specsteer.core.cli import command_parser, reported, whole_number
from specsteer.core.errors import ConfigError, one_line
from specsteer.core.placement import DTYPE_CHOICES, resolve_device, resolve_dtype


@dataclass(frozen=True)
class ModelShape:
    """The sizes that set a dense decoder's cost, as its released config.json states them."""

    family: str  # "qwen2" or "qwen3"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    head_dim: int | None = None  # None: hidden // heads
    source: str = ""


# From each model's config.json on the Hugging Face hub (hidden_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings, head_dim).
CONFIGS: dict[str, ModelShape] = {
    "qwen2.5-0.5b": ModelShape("qwen2", 896, 24, 14, 2, 4864, 151936, True, source="Qwen/Qwen2.5-0.5B config.json"),
    "qwen2.5-1.5b": ModelShape("qwen2", 1536, 28, 12, 2, 8960, 151936, True, source="Qwen/Qwen2.5-1.5B config.json"),
    "qwen2.5-7b": ModelShape("qwen2", 3584, 28, 28, 4, 18944, 152064, False, source="Qwen/Qwen2.5-7B config.json"),
    "qwen3-0.6b": ModelShape("qwen3", 1024, 28, 16, 8, 3072, 151936, True, 128, "Qwen/Qwen3-0.6B config.json"),
    "qwen3-32b": ModelShape("qwen3", 5120, 64, 64, 8, 25600, 151936, False, 128, "Qwen/Qwen3-32B config.json"),
    # Not a real model: a CI smoke run's seconds-long stand-in.
    "tiny": ModelShape("qwen2", 64, 2, 4, 2, 128, 1024, False, source="bench.gpu's smoke configuration"),
    # Not real models either: a pair whose forwards take a few ms on a CPU with the real 152k
    # vocabulary, the regime a GPU's cloud puts the end-to-end run in (bench.random_models with a
    # Qwen tokenizer, then bench.speed; docs/gpu.md, "What the cost model leaves out").
    "vocab-64": ModelShape("qwen2", 64, 2, 4, 2, 128, 151936, True, source="a fast stand-in, real vocabulary"),
    "vocab-128": ModelShape("qwen2", 128, 4, 4, 2, 256, 151936, True, source="a fast stand-in, real vocabulary"),
}
# Generalist -> its generic Specialist, for the verify round: the shipped pair's sizes and the paper's.
PAIRS = {"qwen2.5-1.5b": "qwen2.5-0.5b", "qwen3-32b": "qwen3-0.6b", "tiny": "tiny"}
REAL_CONFIGS = ("qwen2.5-0.5b", "qwen3-0.6b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen3-32b")  # smallest first
RANDOM_WEIGHTS_NOTE = (
    "Weights are random (initialised on the device from the configuration): a dense transformer's "
    "forward costs the same whatever its weight values, and real weights cannot travel to the GPU machine."
)


def hf_config(shape: ModelShape, context: int) -> PretrainedConfig:
    """The transformers config of `shape` (sdpa attention, positions for `context` plus a block)."""
    common: dict[str, Any] = {
        "vocab_size": shape.vocab,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "tie_word_embeddings": shape.tied,
        "max_position_embeddings": max(32768, context + 64),
        "use_sliding_window": False,
    }
    if shape.family == "qwen3":
        return Qwen3Config(head_dim=shape.head_dim or shape.hidden // shape.heads, **common)
    return Qwen2Config(**common)


# --- timing ---------------------------------------------------------------------------------------


def copy_rate(device: torch.device, mib: int, reps: int = 10) -> float:
    """Device-to-device bytes per second of a large `copy_`, counting the bytes read and written."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    src.random_(0, 255)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device, reps)
    return 2 * mib * 2**20 / (ms / 1e3)


# --- byte counts ----------------------------------------------------------------------------------


def weight_bytes(model: PreTrainedModel) -> int:
    """Bytes a forward reads of the weights: all of them, less an untied input embedding (a lookup
    reads only its rows; a tied one is read whole by the output head, so it counts once)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is not embed:
        total -= embed.numel() * embed.element_size()  # type: ignore[operator]
    return total


def kv_bytes(shape: ModelShape, batch: int, tokens: int, element: int) -> int:
    """Bytes of `tokens` positions of K and V across the layers, for `batch` sequences."""
    head_dim = shape.head_dim or shape.hidden // shape.heads
    return 2 * shape.layers * batch * shape.kv_heads * tokens * head_dim * element


# --- one configuration ----------------------------------------------------------------------------


@dataclass
class Options:
    device: torch.device
    dtype: torch.dtype
    context: int
    reps: int
    blocks: tuple[int, ...]
    compiled_blocks: tuple[int, ...]
    batches: tuple[int, ...]
    batch_block: int
    compile: bool
    compile_configs: tuple[str, ...]
    compile_min_s: float
    pool: bool = True
    pool_paths: tuple[str, ...] = ("graphs",)
    pool_batches: tuple[int, ...] = (1, 8, 32, 64, 128)
    round_batches: tuple[int, ...] = (1, 64)
    slot_len: int | None = None


def build(shape: ModelShape, options: Options) -> PreTrainedModel:
    """The model with random weights, allocated and initialised on the device (a 32B never touches
    host memory)."""
    config = hf_config(shape, options.context)
    with torch.device(options.device):
        model = AutoModelForCausalLM.from_config(config, dtype=options.dtype)
    model.eval()
    return model


def random_ids(batch: int, n: int, vocab: int, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, n), generator=gen).to(device)


def positions(batch: int, start: int, n: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start, start + n, device=device).unsqueeze(0).expand(batch, n)


def prefill(model: PreTrainedModel, cache: Any, ids: torch.Tensor) -> None:
    """Fill `cache` with `ids` through the decoder alone (no output head: a 512-token context's
    logits would be the largest tensor of the run)."""
    with torch.no_grad():
        model.model(
            input_ids=ids,
            position_ids=positions(ids.shape[0], 0, ids.shape[1], ids.device),
            past_key_values=cache,
            use_cache=True,
        )


def rewind(cache: Any, length: int) -> None:
    """Roll a static cache back to `length` tokens in place (what a rejected draft costs): transformers
    5.x counts each layer's length in a tensor at a fixed address, which the CUDA graphs read."""
    for layer in cache.layers:
        counter = getattr(layer, "cumulative_length", None)
        if isinstance(counter, torch.Tensor):
            counter.fill_(length)


def crop_to(cache: Any, length: int) -> None:
    """Cut a `DynamicCache` back to `length` tokens (transformers 5 crops by a negative count to remove)."""
    extra = int(cache.get_seq_length()) - length
    if extra > 0:
        cache.crop(-extra)


def measure_eager(model: PreTrainedModel, shape: ModelShape, options: Options) -> tuple[dict[int, float], Any]:
    """Eager blocks of every size on a `DynamicCache` cropped back to the context after each."""
    device, c = options.device, options.context
    cache = DynamicCache(config=model.config)
    prefill(model, cache, random_ids(1, c, shape.vocab, device, seed=1))
    out: dict[int, float] = {}
    for n in options.blocks:
        ids, pos = random_ids(1, n, shape.vocab, device, seed=100 + n), positions(1, c, n, device)

        def run(ids: torch.Tensor = ids, pos: torch.Tensor = pos) -> None:
            with torch.no_grad():
                model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)

        out[n] = median_ms(run, device, options.reps, reset=lambda: crop_to(cache, c))
    crop_to(cache, c)
    return out, cache


def measure_static(
    model: PreTrainedModel, shape: ModelShape, options: Options, compiled: bool, eager_cache: Any, deadline: float
) -> tuple[dict[int, float], float | None, list[int]]:
    """Blocks on a `StaticCache`, compiled with CUDA graphs if asked, and the largest difference
    between its logits and the eager path's for the same block after all the rewinds. Each block
    size compiles its own graph: one that would not finish by `deadline` (judged by the first
    one's compile time) is skipped and returned in the list."""
    device, c = options.device, options.context
    cache = StaticCache(config=model.config, max_cache_len=c + max(options.compiled_blocks) + 1)
    prefill(model, cache, random_ids(1, c, shape.vocab, device, seed=1))

    def forward(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True).logits

    # dynamic=False: one graph per block size, each specialised (CUDA graphs record fixed shapes anyway).
    step = torch.compile(forward, mode="reduce-overhead", fullgraph=False, dynamic=False) if compiled else forward
    out: dict[int, float] = {}
    diff: float | None = None
    skipped: list[int] = []
    needed = options.compile_min_s
    for n in options.compiled_blocks:
        if compiled and time.perf_counter() + needed > deadline:
            skipped.append(n)
            continue
        block_started = time.perf_counter()
        ids, pos = random_ids(1, n, shape.vocab, device, seed=100 + n), positions(1, c, n, device)

        def run(ids: torch.Tensor = ids, pos: torch.Tensor = pos) -> None:
            with torch.no_grad():
                step(ids, pos)

        out[n] = median_ms(run, device, options.reps, reset=lambda: rewind(cache, c))
        needed = 1.2 * (time.perf_counter() - block_started) + 10
        if diff is None:
            rewind(cache, c)
            with torch.no_grad():
                got = step(ids, pos).float().clone()
                crop_to(eager_cache, c)
                want = model(input_ids=ids, position_ids=pos, past_key_values=eager_cache, use_cache=True).logits
            crop_to(eager_cache, c)
            diff = float((got - want.float()).abs().max())
    return out, diff, skipped


def measure_batches(
    model: PreTrainedModel, shape: ModelShape, options: Options, eager_cache: Any
) -> dict[int, float | str]:
    """Batched verify: B sessions x `batch_block` tokens in one eager forward, each at the context."""
    device, c, n = options.device, options.context, options.batch_block
    out: dict[int, float | str] = {}
    for b in options.batches:
        cache: Any = None
        try:
            cache = DynamicCache(config=model.config)
            for index, layer in enumerate(eager_cache.layers):
                # The same context in every row (timing does not depend on the values): one prefill, copied.
                cache.layers[index].update(layer.keys.expand(b, -1, -1, -1), layer.values.expand(b, -1, -1, -1))
            ids, pos = random_ids(b, n, shape.vocab, device, seed=200 + b), positions(b, c, n, device)

            def run(ids: torch.Tensor = ids, pos: torch.Tensor = pos, cache: Any = cache) -> None:
                with torch.no_grad():
                    model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)

            out[b] = median_ms(run, device, options.reps, reset=functools.partial(crop_to, cache, c))
        except torch.OutOfMemoryError:
            out[b] = "out of memory"
        finally:
            del cache
            release(device)
    return out


def measure_config(name: str, options: Options, copy_bps: float, deadline: float) -> dict[str, Any]:
    shape = CONFIGS[name]
    row: dict[str, Any] = {"config": name, "shape": asdict(shape)}
    started = time.perf_counter()
    model = build(shape, options)
    try:
        element = torch.finfo(options.dtype).bits // 8
        weights = weight_bytes(model)
        row["parameters"] = sum(p.numel() for p in model.parameters())
        row["weight_bytes"] = weights
        row["build_s"] = round(time.perf_counter() - started, 2)
        c = options.context

        def floor_ms(batch: int, n: int) -> float:
            return (weights + kv_bytes(shape, batch, c + n, element)) / copy_bps * 1e3

        eager, eager_cache = measure_eager(model, shape, options)
        row["eager_ms"] = {str(n): round(ms, 3) for n, ms in eager.items()}
        row["floor_ms"] = {str(n): round(floor_ms(1, n), 3) for n in options.blocks}
        row["eager_vs_floor"] = {str(n): round(ms / floor_ms(1, n), 2) for n, ms in eager.items()}
        compiled = options.compile and name in options.compile_configs
        compile_started = time.perf_counter()
        try:
            static, diff, skipped = measure_static(model, shape, options, compiled, eager_cache, deadline)
            if skipped:
                row["compile_skipped"] = f"blocks {skipped}: their compile would not fit the time budget left"
            row["static_compiled"] = compiled
            row["static_ms"] = {str(n): round(ms, 3) for n, ms in static.items()}
            row["static_vs_floor"] = {str(n): round(ms / floor_ms(1, n), 2) for n, ms in static.items()}
            row["static_vs_eager_max_abs_diff"] = diff
            row["static_s"] = round(time.perf_counter() - compile_started, 1)
        except Exception as exc:  # a compile failure must not lose the eager figures
            row["static_error"] = _error(exc)
        batches = measure_batches(model, shape, options, eager_cache)
        row["batch_ms"] = {str(b): v if isinstance(v, str) else round(v, 3) for b, v in batches.items()}
        row["batch_floor_ms"] = {str(b): round(floor_ms(b, options.batch_block), 3) for b in options.batches}
        one = batches.get(1)
        if isinstance(one, float):
            row["batch_throughput_vs_one"] = {
                str(b): round(b * one / v, 2) for b, v in batches.items() if isinstance(v, float)
            }
        del eager_cache
        release(options.device)
        if options.pool:
            measure_lean_path(row, model, name, options, floor_ms, deadline)
    finally:
        del model
        release(options.device)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def measure_lean_path(
    row: dict[str, Any],
    model: PreTrainedModel,
    name: str,
    options: Options,
    floor_ms: Callable[[int, int], float],
    deadline: float,
) -> None:
    """The slot pool's replays (`bench.gpu_pool`) into `row`, each beside its floor; and for a
    Generalist of `PAIRS`, a whole verify round with its generic Specialist. A failure is recorded
    in the row and costs only these figures."""
    row["pools"], row["pool_errors"], row["pool_skipped"] = {}, {}, {}
    for path in options.pool_paths:
        if POOL_PATHS[path]["compiled"]:
            left = deadline - time.perf_counter()
            if name not in options.compile_configs:
                row["pool_skipped"][path] = f"{name} is not among --compile-configs"
                continue
            if left < options.compile_min_s:
                row["pool_skipped"][path] = f"{left:.0f} s of the time budget left, under --compile-min-s"
                continue
        try:
            pool = measure_pool(
                model,
                context=options.context,
                blocks=options.blocks,
                batches=options.pool_batches,
                batch_block=options.batch_block,
                reps=options.reps,
                path=path,
                slot_len=options.slot_len,
            )
            pool["block_vs_floor"] = {n: round(ms / floor_ms(1, int(n)), 2) for n, ms in pool["block_ms"].items()}
            pool["batch_floor_ms"] = {b: round(floor_ms(int(b), options.batch_block), 3) for b in pool["batch_ms"]}
            row["pools"][path] = pool
        except Exception as exc:  # the other figures stand without these
            row["pool_errors"][path] = _error(exc)
        finally:
            release(options.device)
    partner = PAIRS.get(name)
    uncompiled = [path for path in options.pool_paths if not POOL_PATHS[path]["compiled"]]
    if partner is None or not uncompiled:  # a compiled round would compile both models again
        return
    specialist = None
    try:
        specialist = build(CONFIGS[partner], options)
        row["round"] = {"specialist": partner} | measure_round(
            model,
            specialist,
            context=options.context,
            n=options.batch_block,
            batches=options.round_batches,
            reps=options.reps,
            fused="fused" in uncompiled,
        )
    except Exception as exc:
        row["round_error"] = _error(exc)
    finally:
        del specialist
        release(options.device)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {one_line(exc)}"


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def fits_memory(shape: ModelShape, options: Options) -> str | None:
    """Why `shape` cannot be measured on this GPU (None if its weights fit with room to spare)."""
    if options.device.type != "cuda":
        return None
    config = hf_config(shape, options.context)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=options.dtype)
    need = sum(p.numel() * p.element_size() for p in model.parameters())
    free, _ = torch.cuda.mem_get_info(options.device)
    if need > 0.92 * free:
        return f"its {need / 1e9:.1f} GB of weights do not fit in the {free / 1e9:.1f} GB free"
    return None


# --- the run --------------------------------------------------------------------------------------


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def run(options: Options, names: Sequence[str], out: Path, deadline_s: float, copy_mib: int) -> dict[str, Any]:
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    if options.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # bf16 runs bf16; an fp32 run stays fp32
    copy_bps = copy_rate(options.device, copy_mib)
    meta: dict[str, Any] = {
        "device": device_name(options.device),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "dtype": str(options.dtype).removeprefix("torch."),
        "context_tokens": options.context,
        "reps": options.reps,
        "copy_rate_bytes_per_s": copy_bps,
        "copy_rate_counts": "bytes read + bytes written of one large Tensor.copy_",
        "floor": "(weight bytes read + KV bytes read) / copy rate",
        "compile": options.compile,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "weights": RANDOM_WEIGHTS_NOTE,
    }
    rows: list[dict[str, Any]] = []
    for name in names:
        deadline = start + deadline_s
        left = deadline - time.perf_counter()
        reason = fits_memory(CONFIGS[name], options)
        if reason is None and left < 20:
            reason = f"{left:.0f} s of the time budget left"
        if reason is not None:
            rows.append({"config": name, "skipped": reason})
        else:
            try:
                rows.append(measure_config(name, options, copy_bps, deadline))
            except torch.OutOfMemoryError as exc:
                rows.append({"config": name, "skipped": f"out of memory: {' '.join(str(exc).split())[:200]}"})
                release(options.device)
            if options.compile or any(POOL_PATHS[path]["compiled"] for path in options.pool_paths):
                torch.compiler.reset()  # drops the CUDA graphs' memory pools and compiled code before the next model
        print(json.dumps(rows[-1]), flush=True)
        meta["seconds"] = round(time.perf_counter() - start, 1)
        write(out, meta, rows)
    return {"meta": meta, "rows": rows}


def write(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    write_results(out, "gpu", {"meta": meta, "rows": rows}, page(meta, rows))


def page(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    bps = meta["copy_rate_bytes_per_s"]
    rate = f"{bps / 1e12:.2f} TB/s" if bps >= 1e12 else f"{bps / 1e9:.1f} GB/s"
    lines = [
        "# The verifier's forwards on a GPU, beside the bandwidth floor",
        "",
        f"Device: **{meta['device']}**, {meta['date']}; {meta['dtype']}, KV context {meta['context_tokens']} "
        f"tokens, median of {meta['reps']}; torch {meta['torch']}, transformers {meta['transformers']}.",
        f"Copy rate measured in this run: {rate} ({meta['copy_rate_counts']}); floor = {meta['floor']}.",
        "",
        meta["weights"],
        "",
        "`python -m bench.gpu` (bench/gpu.py) wrote this page and gpu.json.",
        "",
        "## One session: step and verify blocks (ms; x floor)",
        "",
        "| config | path | " + " | ".join(f"{n} tok" for n in _block_keys(rows)) + " |",
        "|---|---|" + "---|" * len(_block_keys(rows)),
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['config']} | skipped: {row['skipped']} |" + " |" * len(_block_keys(rows)))
            continue
        lines.append(_block_line(row, "floor", row["floor_ms"], None))
        lines.append(_block_line(row, "eager", row["eager_ms"], row["eager_vs_floor"]))
        if "static_ms" in row:
            label = "static + compile" if row["static_compiled"] else "static (not compiled)"
            lines.append(_block_line(row, label, row["static_ms"], row["static_vs_floor"]))
        elif "static_error" in row:
            lines.append(f"| {row['config']} | static failed: {row['static_error']} |" + " |" * len(_block_keys(rows)))
    lines += ["", "## Batched verify (eager): B sessions x 5 tokens in one forward", ""]
    lines += ["| config | B | ms | floor ms | verified tokens/s vs one session |", "|---|---|---|---|---|"]
    for row in rows:
        for b, ms in row.get("batch_ms", {}).items():
            ratio = row.get("batch_throughput_vs_one", {}).get(b, "")
            shown = ms if isinstance(ms, str) else f"{ms:.2f}"
            lines.append(f"| {row['config']} | {b} | {shown} | {row['batch_floor_ms'][b]:.2f} | {ratio} |")
    lines += pool_sections(rows, meta["reps"])
    notes = [f"- {r['config']}: compile skipped ({r['compile_skipped']})" for r in rows if "compile_skipped" in r] + [
        f"- {r['config']}: static-cache logits vs eager, max abs diff {r['static_vs_eager_max_abs_diff']:.3g}"
        for r in rows
        if r.get("static_vs_eager_max_abs_diff") is not None
    ]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def pool_sections(rows: list[dict[str, Any]], reps: int) -> list[str]:
    """The lean path's tables: one session's replays beside the floor, batched replays, whole rounds."""
    lines = ["", "## Lean path: slot pool, CUDA-graph replays (ms; x floor)", ""]
    keys = _block_keys(rows)
    lines += ["| config | path | " + " | ".join(f"{n} tok" for n in keys) + " |", "|---|---|" + "---|" * len(keys)]
    for row in rows:
        for path, error in row.get("pool_errors", {}).items():
            lines.append(f"| {row['config']} | {path}: failed: {error} |" + " |" * len(keys))
        for path, reason in row.get("pool_skipped", {}).items():
            lines.append(f"| {row['config']} | {path}: not measured: {reason} |" + " |" * len(keys))
        for path, pool in row.get("pools", {}).items():
            label = f"{path} ({pool['seconds']:.0f} s with captures and compiles)"
            lines.append(_block_line(row, label, pool["block_ms"], pool["block_vs_floor"]))
    lines += ["", "B sessions x 5 tokens in one replay (slots of L positions, attending over W columns):", ""]
    lines += [
        "| config | path | B | ms | floor ms | verified tokens/s vs one session | L, W | over whole slots ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for path, pool in row.get("pools", {}).items():
            for b, ms in pool.get("batch_ms", {}).items():
                shown = ms if isinstance(ms, str) else f"{ms:.2f}"
                ratio = pool.get("batch_throughput_vs_one", {}).get(b, "")
                floor = pool["batch_floor_ms"][b]
                geometry = f"{pool.get('slot_len', '')}, {pool.get('batch_window', '')}"
                whole = pool.get("whole_slot_batch_ms", {}).get(b, "")
                lines.append(
                    f"| {row['config']} | {path} | {b} | {shown} | {floor:.2f} | {ratio} | {geometry} | {whole} |"
                )
    lines += ["", "## A whole verify round in one replay", ""]
    lines += [
        "Both cloud blocks (Generalist and generic Specialist, 5 tokens a session), the ratio inputs, P_G's "
        "greedy tokens and every position's top-k steering vector, read back to the host; beside the two "
        f"blocks replayed alone (median of {reps} each).",
        "",
        "| Generalist | generic Specialist | B | round ms | blocks alone ms | round / blocks |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "round_error" in row:
            lines.append(f"| {row['config']} | failed: {row['round_error']} | | | | |")
            continue
        rnd: dict[str, Any] = row.get("round", {})
        for b, got in rnd.get("by_batch", {}).items():
            if isinstance(got, str):
                lines.append(f"| {row['config']} | {rnd['specialist']} | {b} | {got} | | |")
                continue
            alone = got["generalist_block_ms"] + got["specialist_block_ms"]
            lines.append(
                f"| {row['config']} | {rnd['specialist']} | {b} | {got['round_ms']:.2f} | {alone:.2f} | "
                f"{got['round_vs_blocks']:.2f} |"
            )
    return lines


def _block_keys(rows: list[dict[str, Any]]) -> list[str]:
    keys: set[str] = set()
    for row in rows:
        keys |= set(row.get("eager_ms", {})) | set(row.get("static_ms", {}))
    return sorted(keys, key=int)


def _block_line(row: dict[str, Any], label: str, ms: dict[str, float], ratio: dict[str, float] | None) -> str:
    cells = []
    for n in _block_keys([row]):
        if n not in ms:
            cells.append("")
        elif ratio is None:
            cells.append(f"{ms[n]:.2f}")
        else:
            cells.append(f"{ms[n]:.2f} ({ratio[n]:.2f}x)")
    return f"| {row['config']} | {label} | " + " | ".join(cells) + " |"


# --- command line ---------------------------------------------------------------------------------


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"every size must be at least 1: {text!r}")
    return values


def _pool_paths(text: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in paths if p not in POOL_PATHS]
    if unknown or not paths:
        raise argparse.ArgumentTypeError(f"not slot-pool paths ({', '.join(POOL_PATHS)}): {text!r}")
    return paths


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("bench.gpu", __doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cpu, cuda or cuda:N (default cuda)")
    p.add_argument("--dtype", default="bfloat16", choices=DTYPE_CHOICES, help="weights and KV (default bfloat16)")
    p.add_argument(
        "--configs",
        default="all",
        help=f"comma-separated names of {', '.join(CONFIGS)}; 'all' = the real ones, smallest first",
    )
    p.add_argument("--context", type=whole_number(1), default=512, help="KV context in tokens (default 512)")
    p.add_argument("--reps", type=whole_number(1), default=15, help="timed repetitions per figure (median)")
    p.add_argument("--blocks", type=_sizes, default=tuple(range(1, 10)), help="eager block sizes (default 1..9)")
    p.add_argument("--compiled-blocks", type=_sizes, default=(1, 5), help="static-cache block sizes (default 1,5)")
    p.add_argument("--batches", type=_sizes, default=(1, 8, 32, 64), help="sessions per batched verify")
    p.add_argument("--batch-block", type=whole_number(1), default=5, help="tokens per session in a batched verify")
    p.add_argument("--compile", action="store_true", help="compile the static-cache path with CUDA graphs")
    p.add_argument("--no-pool", action="store_true", help="skip the slot pool's CUDA-graph replays (the lean path)")
    p.add_argument(
        "--pool-paths",
        type=_pool_paths,
        default=("graphs",),
        help=f"the slot pool's paths to time, comma-separated, of {', '.join(POOL_PATHS)} (default graphs: "
        "transformers' forward under CUDA graphs; fused: the pool's own forward; +compiled: inductor too)",
    )
    p.add_argument("--pool-batches", type=_sizes, default=(1, 8, 32, 64, 128), help="sessions per slot-pool replay")
    p.add_argument("--round-batches", type=_sizes, default=(1, 64), help="sessions per whole-round replay")
    p.add_argument(
        "--slot-len",
        type=whole_number(2),
        default=None,
        help="positions per slot of the pool's replays, as a server's kv_max_len (default: the context and the "
        "longest block); longer, the batches are also timed attending over whole slots",
    )
    p.add_argument(
        "--compile-configs",
        default="qwen2.5-1.5b,qwen3-32b,tiny",
        help="the configs --compile and the compiled --pool-paths apply to (a static-cache compile takes about "
        "1 min per block size, 3-4 for the 32B)",
    )
    p.add_argument(
        "--compile-min-s", type=float, default=240.0, help="start a config's first compile only with this many s left"
    )
    p.add_argument("--deadline-s", type=float, default=420.0, help="time budget of the whole run in seconds")
    p.add_argument("--copy-mib", type=whole_number(1), default=None, help="MiB of the copy-rate probe")
    p.add_argument("--out", type=Path, default=Path("docs/results"), help="folder for gpu.json and gpu.md")
    return p


def _names(text: str) -> list[str]:
    if text == "all":
        return list(REAL_CONFIGS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        given, known = ", ".join(map(repr, unknown)) or repr(text), ", ".join(CONFIGS)
        raise ConfigError(f"Unknown configuration {given}: use 'all' or some of {known}.")
    order = {n: i for i, n in enumerate((*REAL_CONFIGS, "tiny"))}
    return sorted(names, key=order.__getitem__)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def command() -> int:
        device = resolve_device(args.device)
        options = Options(
            device=device,
            dtype=resolve_dtype(args.dtype),
            context=args.context,
            reps=args.reps,
            blocks=args.blocks,
            compiled_blocks=args.compiled_blocks,
            batches=args.batches,
            batch_block=args.batch_block,
            compile=args.compile,
            compile_configs=tuple(_names(args.compile_configs)),
            compile_min_s=args.compile_min_s,
            pool=not args.no_pool,
            pool_paths=args.pool_paths,
            pool_batches=args.pool_batches,
            round_batches=args.round_batches,
            slot_len=args.slot_len,
        )
        copy_mib = args.copy_mib or (1024 if device.type == "cuda" else 64)
        result = run(options, _names(args.configs), args.out, args.deadline_s, copy_mib)
        print(f"bench.gpu: {len(result['rows'])} configurations on {result['meta']['device']} -> {args.out}")
        return 0

    return reported("bench.gpu", command)


if __name__ == "__main__":
    sys.exit(main())
