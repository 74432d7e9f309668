"""The speed benchmark's side-by-side modes: each variant's forwards timed in one run, no generation.

python -m bench.speed --compare-quantize   # both models in fp32 and int8 (TAG_quantize.*)
python -m bench.speed --compare-kernels    # fp32 on torch's Linear kernel and on oneDNN (TAG_kernels.*)
python -m bench.speed --compare-drafters   # the device's draft step on torch and on llama.cpp (TAG_drafters.*)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence

import torch

from bench.speed_page import command_line
from bench.speed_timing import DEMO, bare_forward_time, demo_device_ids, drafter_times, logger, torch_drafter_times
from specsteer.core.linear import onednn_available, resolve_linear_kernel, use_linear_kernel
from specsteer.core.models import load_causal_lm
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.sdk.llamacpp import drafter_for

__all__ = ["compare_drafters", "compare_kernels", "compare_quantize"]


def compare_quantize(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Step and block costs of each model in fp32, then int8 (loaded again and quantized), same run."""
    prompt = task_prompt(json.loads(DEMO.read_text(encoding="utf-8"))["queries"][0]["subject"])
    sizes = _compared_sizes(args)
    log = logger()
    result: dict[str, dict[str, dict[str, float]]] = {}
    for spec in (args.specialist, args.generalist):
        result[spec] = {}
        for quantize in ("fp32", "int8"):
            lm = load_causal_lm(spec, quantize=quantize, linear_kernel=args.linear_kernel)
            ids = render_prompt(lm, prompt)
            result[spec][quantize] = {str(n): bare_forward_time(lm, ids, n, args.reps) for n in sizes}
            log(f"{spec} {quantize}: " + _costs_line(result[spec][quantize]))
            del lm
    title = f"fp32 (Linear kernel {resolve_linear_kernel(args.linear_kernel)}) vs int8 dynamic quantization"
    return _write_comparison(args, argv, "quantize", title, result, sizes)


def compare_kernels(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Step and block costs of each fp32 model on torch's Linear kernel (MKL) and on oneDNN, same run.

    One loaded model switches kernel in place, and the kernels take turns over `--kernel-rounds`
    rounds (median of the rounds' medians), so both see the same spells of this machine's drift.
    """
    if not onednn_available():
        print("bench.speed: --compare-kernels needs oneDNN, which this torch build does not have.", file=sys.stderr)
        return 2
    prompt = task_prompt(json.loads(DEMO.read_text(encoding="utf-8"))["queries"][0]["subject"])
    sizes = _compared_sizes(args)
    log = logger()
    result: dict[str, dict[str, dict[str, float]]] = {}
    for spec in (args.specialist, args.generalist):
        lm = load_causal_lm(spec, linear_kernel="torch")
        ids = render_prompt(lm, prompt)
        runs: dict[str, dict[str, list[float]]] = {k: {str(n): [] for n in sizes} for k in ("torch", "onednn")}
        for _ in range(args.kernel_rounds):
            for kernel, by_size in runs.items():
                use_linear_kernel(lm.model, kernel)
                for n in sizes:
                    by_size[str(n)].append(bare_forward_time(lm, ids, n, args.reps))
        result[spec] = {k: {n: statistics.median(v) for n, v in by.items()} for k, by in runs.items()}
        for kernel, costs in result[spec].items():
            log(f"{spec} {kernel}: " + _costs_line(costs))
        del lm
    title = "fp32 on torch's Linear kernel (MKL) vs oneDNN"
    return _write_comparison(args, argv, "kernels", title, result, sizes)


def compare_drafters(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """The device's draft step and its private prompt's prefill on torch and on llama.cpp (the
    same GGUF), taking turns over `--kernel-rounds` rounds in one process."""
    lm = load_causal_lm(args.specialist, linear_kernel=args.linear_kernel)
    drafter = drafter_for("llamacpp", args.specialist, lm)
    assert drafter is not None
    ids = demo_device_ids(lm)
    log = logger()
    turns: dict[str, dict[str, list[float]]] = {d: {"step": [], "prefill": []} for d in ("torch", "llamacpp")}
    for _ in range(args.kernel_rounds):
        for name, times in turns.items():
            if name == "torch":
                step, prefill = torch_drafter_times(lm, ids, args.reps)
            else:
                step, prefill = drafter_times(drafter, ids, args.reps)
            times["step"].append(step)
            times["prefill"].append(prefill)
            log(f"{name}: step {step * 1e3:.0f} ms, prefill of {len(ids)} tokens {prefill * 1e3:.0f} ms")
    result = {d: {what: statistics.median(v) for what, v in by.items()} for d, by in turns.items()}
    command = command_line(argv)
    t, f = result["torch"], result["llamacpp"]
    lines = [
        f"# The device's drafter: torch (Linear kernel {resolve_linear_kernel(args.linear_kernel)}) vs llama.cpp, "
        f"{args.specialist} (same run)",
        "",
        f"`{command}`: on the demo user's private prompt ({len(ids)} tokens with its retrieved examples); "
        f"{torch.get_num_threads()} threads; each the median of {args.kernel_rounds} alternating turns, each turn the "
        f"median of {args.reps} steps (3 prefills). llama.cpp's times include the log-softmax the device reads.",
        "",
        "| cost | torch ms | llama.cpp ms | torch / llama.cpp |",
        "|---|---|---|---|",
        f"| draft step | {t['step'] * 1e3:.0f} | {f['step'] * 1e3:.0f} | {t['step'] / f['step']:.2f}x |",
        f"| prefill | {t['prefill'] * 1e3:.0f} | {f['prefill'] * 1e3:.0f} | {t['prefill'] / f['prefill']:.2f}x |",
    ]
    out = args.out / f"{args.tag}_drafters"
    out.with_suffix(".json").write_text(
        json.dumps({"command": command, "prompt_tokens": len(ids), "seconds": result, "turns": turns}, indent=2) + "\n"
    )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    log(f"wrote {out}.md")
    return 0


def _compared_sizes(args: argparse.Namespace) -> list[int]:
    return sorted({1, 2, args.draft_len + 1, args.k_max + 1})


def _costs_line(costs: dict[str, float]) -> str:
    return ", ".join(f"{n}-token {v * 1e3:.0f} ms" for n, v in costs.items())


def _write_comparison(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    stem: str,
    title: str,
    result: dict[str, dict[str, dict[str, float]]],
    sizes: Sequence[int],
) -> int:
    """TAG_STEM.md and .json: each model's costs under two variants, their ratio and each block over its step."""
    command = command_line(argv)
    a, b = next(iter(result.values())).keys()
    lines = [
        f"# Step and block cost, {title} (bare forwards, same run)",
        "",
        f"`{command}`, {torch.get_num_threads()} torch threads, median of {args.reps}.",
        "",
        f"| model | tokens | {a} ms | {b} ms | {b} / {a} | {a} block / step | {b} block / step |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec, by in result.items():
        for n in map(str, sizes):
            x, y = by[a][n], by[b][n]
            lines.append(
                f"| {spec} | {n} | {x * 1e3:.0f} | {y * 1e3:.0f} | {y / x:.2f} "
                f"| {x / by[a]['1']:.2f} | {y / by[b]['1']:.2f} |"
            )
    out = args.out / f"{args.tag}_{stem}"
    out.with_suffix(".json").write_text(json.dumps({"command": command, "seconds": result}, indent=2) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    logger()(f"wrote {out}.md")
    return 0
