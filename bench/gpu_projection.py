"""The speed claim projected with the GPU's measured costs: `bench.cost_model` fed the slot pool's
block times from a `bench.gpu` run, for one (Generalist, generic Specialist) pair.

    python -m bench.gpu_projection --gpu docs/results/gpu.json --generalist qwen3-32b --specialist qwen3-0.6b \\
        --mean-accepted 2.35 --draft-len 4 --draft-step-ms 25 --out docs/results

Per RTT, tokens/s of:
- `specsteer` at its best K (1..8): a round is K device draft steps (each with its greedy pick), one
  check of the egress guard, both cloud blocks of K+1 tokens (the measured replays; a whole round
  measured within a few % of the two blocks alone) and one RTT, and commits E(K) = 1 + a(1-a^K)/(1-a)
  tokens, with a fitted to `--mean-accepted` drafts accepted per round of `--draft-len` (measured on
  the real pair on this CPU);
- `fusion` (full-vocabulary steering): every token a device step, a guard check, a cloud step of both
  models, an RTT, the whole vector (4 bytes a vocabulary entry) over `--downlink-mbps` and the
  device's fusion of it;
- `llm` as the SDK runs it (one round, so one RTT, a token) and `llm` streamed (the cloud decoding
  alone, no RTT a token: the fastest a cloud-only answer can arrive).
The device's work around its forwards (the pick, the guard check, fusion's decoding and fused pick)
comes from `--device-work`, a `bench.device_work` JSON of the device that drafts (none: left out).
Then, over a grid of RTTs and draft-step costs: where `specsteer` reaches 3x `fusion`, and where it
beats each `llm`. A projection, not a measurement: the model's end-to-end check on the GPU (the
real server at each RTT) is not in this run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cost_model import Costs, best_k, expected_tokens, fit_acceptance, fusion_round, predicted_tps
from bench.results import write_results
from specsteer.core.cli import command_parser, reported
from specsteer.core.errors import ConfigError

RTTS_MS = (0, 20, 50, 100)
GRID_RTTS_MS = (0, 10, 20, 50, 100, 200)
GRID_DRAFT_MS = (2, 5, 10, 25, 50)
K_MAX = 8


def fastest_pool(row: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(path, its figures) of the slot-pool path with the fastest step among those a bench.gpu row
    timed (older JSON files hold one, as "pool"), or None where it timed none."""
    old = row.get("pool")
    pools = row.get("pools") or ({"graphs+compiled" if old.get("compiled") else "graphs": old} if old else {})
    if not pools:
        return None
    return min(pools.items(), key=lambda item: min(item[1]["block_ms"].values()))


def pool_blocks(gpu: dict[str, Any], config: str) -> dict[int, float]:
    """The slot pool's replayed block times of `config` (seconds by block size) from a bench.gpu JSON,
    on its fastest path (`fastest_pool`)."""
    for row in gpu["rows"]:
        if row.get("config") != config:
            continue
        fastest = fastest_pool(row)
        if fastest is not None:
            return {int(n): ms / 1e3 for n, ms in fastest[1]["block_ms"].items()}
    raise ConfigError(f"{config} has no slot-pool block times in that bench.gpu JSON.")


def rates(costs: Costs, a: float, rtt: float, vector_s: float) -> dict[str, float]:
    """Tokens/s of each method at `rtt` seconds (see the module docstring)."""
    k = best_k(a, costs, rtt, K_MAX)
    fusion = 1 / (fusion_round(costs, rtt) + vector_s)
    return {
        "best_k": k,
        "specsteer": predicted_tps(a, k, costs, rtt),
        "fusion": fusion,
        "llm_rounds": 1 / (costs.g_step + rtt),
        "llm_streamed": 1 / costs.g_step,
    }


def project(gpu: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    g_blocks, s_blocks = pool_blocks(gpu, args.generalist), pool_blocks(gpu, args.specialist)
    a = fit_acceptance(args.mean_accepted, args.draft_len)
    vocab = next(r["shape"]["vocab"] for r in gpu["rows"] if r.get("config") == args.specialist)
    vector_s = vocab * 4 * 8 / (args.downlink_mbps * 1e6)
    work = device_work(args.device_work)

    def costs(draft_ms: float) -> Costs:
        return Costs(draft_step=draft_ms / 1e3, g_blocks=g_blocks, s_blocks=s_blocks, **work)

    by_rtt = {str(r): rates(costs(args.draft_step_ms), a, r / 1e3, vector_s) for r in RTTS_MS}
    grid = []
    for d in GRID_DRAFT_MS:
        for r in GRID_RTTS_MS:
            got = rates(costs(d), a, r / 1e3, vector_s)
            grid.append({"draft_step_ms": d, "rtt_ms": r, **got})
    return {
        "device": gpu["meta"]["device"],
        "generalist": args.generalist,
        "specialist": args.specialist,
        "acceptance_a": a,
        "expected_tokens_per_round_at_best_k": {k: expected_tokens(a, v["best_k"]) for k, v in by_rtt.items()},
        "mean_accepted": args.mean_accepted,
        "draft_len": args.draft_len,
        "draft_step_ms": args.draft_step_ms,
        "device_work_ms": {k: v * 1e3 for k, v in work.items()},
        "device_work_from": str(args.device_work) if args.device_work else None,
        "downlink_mbps": args.downlink_mbps,
        "fusion_vector_ms": vector_s * 1e3,
        "by_rtt_ms": by_rtt,
        "grid": grid,
    }


def device_work(path: Path | None) -> dict[str, float]:
    """The device's work around its forwards from a `bench.device_work` JSON (seconds by `Costs`
    field); none without a file."""
    if path is None:
        return {}
    try:
        seconds = json.loads(path.read_text()).get("seconds", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"Cannot read the bench.device_work JSON {path}: {exc}.") from None
    keys = ("greedy_pick", "sampled_draw", "guard_check", "fuse")
    missing = [k for k in keys if not isinstance(seconds.get(k), int | float)]
    if missing:
        raise ConfigError(f"Cannot read the bench.device_work JSON {path}: no seconds for {', '.join(missing)}.")
    return {k: float(seconds[k]) for k in keys}


def page(result: dict[str, Any], command: str) -> str:
    work = result.get("device_work_ms") or {}
    lines = [
        f"# Projection: {result['generalist']} verifying for {result['specialist']} (cost model, {result['device']})",
        "",
        f"`{command}`",
        "",
        f"Per-token acceptance a = {result['acceptance_a']:.3f} (fitted to {result['mean_accepted']} drafts "
        f"accepted per round of {result['draft_len']}); device draft step {result['draft_step_ms']} ms; "
        + (
            f"the device's work around its forwards ({result['device_work_from']}): a greedy pick "
            f"{work['greedy_pick']:.3f} ms a draft, a guard check {work['guard_check']:.3f} ms a round, "
            f"fusion {work['fuse']:.3f} ms a token; "
            if work
            else "the device's work around its forwards left out (no --device-work); "
        )
        + f"fusion's whole vector {result['fusion_vector_ms']:.1f} ms at {result['downlink_mbps']} Mbit/s. "
        "Cloud blocks: the slot pool's CUDA-graph replays of random-weight models of these configurations. "
        "A projection: the end-to-end run that would check the model on the GPU is not part of it.",
        "",
        "| RTT ms | best K | specsteer tok/s | fusion tok/s | specsteer / fusion | llm (a round a token) | "
        "llm streamed | specsteer / llm streamed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rtt, got in result["by_rtt_ms"].items():
        lines.append(
            f"| {rtt} | {got['best_k']} | {got['specsteer']:.1f} | {got['fusion']:.1f} | "
            f"{got['specsteer'] / got['fusion']:.2f}x | {got['llm_rounds']:.1f} | {got['llm_streamed']:.1f} | "
            f"{got['specsteer'] / got['llm_streamed']:.2f}x |"
        )
    lines += [
        "",
        "Over draft-step costs (rows, ms) and RTTs (columns, ms): specsteer / fusion; "
        "**bold** where specsteer also beats llm streamed, * where it beats llm run a round a token.",
        "",
        "| draft ms | " + " | ".join(str(r) for r in GRID_RTTS_MS) + " |",
        "|---|" + "---|" * len(GRID_RTTS_MS),
    ]
    for d in GRID_DRAFT_MS:
        cells = []
        for cell in (c for c in result["grid"] if c["draft_step_ms"] == d):
            text = f"{cell['specsteer'] / cell['fusion']:.1f}x"
            if cell["specsteer"] > cell["llm_streamed"]:
                text = f"**{text}**"
            if cell["specsteer"] > cell["llm_rounds"]:
                text += "*"
            cells.append(text)
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("bench.gpu_projection", __doc__.splitlines()[0])
    p.add_argument("--gpu", type=Path, default=Path("docs/results/gpu.json"), help="a bench.gpu JSON")
    p.add_argument("--generalist", default="qwen3-32b")
    p.add_argument("--specialist", default="qwen3-0.6b", help="the generic Specialist's configuration")
    p.add_argument("--mean-accepted", type=float, required=True, help="drafts accepted per round, measured")
    p.add_argument("--draft-len", type=int, default=4, help="K of the rounds that measured it")
    p.add_argument("--draft-step-ms", type=float, required=True, help="the device's draft step, measured")
    p.add_argument("--downlink-mbps", type=float, default=100.0, help="for fusion's whole vector (default 100)")
    p.add_argument("--device-work", type=Path, help="a bench.device_work JSON: the device's pick, guard check, fusion")
    p.add_argument("--name", default="gpu_projection", help="OUT/NAME.{md,json}")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def command() -> int:
        try:
            gpu = json.loads(args.gpu.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"Cannot read the bench.gpu JSON {args.gpu}: {exc}.") from None
        result = project(gpu, args)
        shown = "python -m bench.gpu_projection " + " ".join(sys.argv[1:] if argv is None else argv)
        result["command"] = shown
        write_results(args.out, args.name, result, page(result, shown))
        print(page(result, shown))
        return 0

    return reported("bench.gpu_projection", command)


if __name__ == "__main__":
    sys.exit(main())
