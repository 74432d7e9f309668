"""The device's Specialist on torch fp32 and on onnxruntime-genai (int4, int8): conversion, draft step,
rollback, peak memory and greedy agreement, measured in one run.

    python -m bench.device_runtime                       # the default Specialist, int4 and int8
    python -m bench.device_runtime --fresh-conversion    # also time the one-off conversions
    python -m bench.device_runtime --adapter             # + a LoRA merged in (synthetic, seeded)

Timings on a shared CPU drift, so the backends take turns step by step in one process (each step
of each backend sees the same spells of load) and the page reports each ORT step's ratio to
torch's beside the medians. Peak memory is measured in a child process per backend that loads the
Specialist as the device does (`ru_maxrss`, what `/usr/bin/time -f %M` prints): torch with its
weights; ORT with the torch model's tokenizer and shapes only (`weights=False`), as
`sdk generate --server ... --drafter onnx` loads it. Agreement is teacher-forced: on torch's greedy
continuation of each prompt, the share of positions where ORT's most likely token is torch's.
Writes docs/results/device_runtime.{md,json} (or `--out`).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.speed_timing import DEMO
from specsteer.core.gguf_cache import cache_root
from specsteer.core.kv import CachedSequence, TokenSequence
from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.core.models import CausalLM, load_causal_lm
from specsteer.core.onnx_cache import converted_onnx, folder_fingerprint
from specsteer.core.prompts import task_prompt
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import Specialist
from specsteer.sdk.onnx_drafter import OnnxDrafter, onnx_source

__all__ = ["main"]

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "device_runtime"


def _prompt_ids(lm: CausalLM, tokens: int, drafter: OnnxDrafter | None = None) -> list[int]:
    """A device prompt of about `tokens` tokens: the demo user's first query with its private context."""
    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    profile = Profile.from_file(DEMO)
    specialist = Specialist(lm, profile, context_chars=4000, context_entries=8, drafter=drafter)
    ids = specialist.private_prompt_ids(task_prompt(demo["queries"][0]["subject"]), with_context=True)
    return ids[-tokens:] if len(ids) >= tokens else ids


def _agreement_prompts(lm: CausalLM) -> list[list[int]]:
    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    specialist = Specialist(lm, Profile.from_file(DEMO))
    # The last 512 tokens at most: the prompts' ends are what the drafts continue.
    return [specialist.private_prompt_ids(task_prompt(q["subject"]), with_context=True)[-512:] for q in demo["queries"]]


def _convert(spec: str, precision: str, onnx_cache: Path) -> tuple[Path, float | None]:
    """The converted folder and the seconds its conversion took (None: it was cached)."""
    source, stem = onnx_source(spec)
    fingerprint = folder_fingerprint(source)
    target = onnx_cache / "onnx" / f"{stem}-{precision}-{fingerprint[:16]}"
    cached = target.is_dir()
    start = time.perf_counter()
    folder = converted_onnx(lambda: source, fingerprint, precision, onnx_cache, stem=stem)
    return folder, None if cached else round(time.perf_counter() - start, 1)


# --- one process per backend: load, prefill, a few steps, its peak memory ----------------------


def _child(backend: str, spec: str, folder: str | None, prompt_tokens: int, steps: int) -> dict[str, Any]:
    start = time.perf_counter()
    drafter = None
    if backend.startswith("torch"):
        lm = load_causal_lm(spec, progress=False)
        make = lambda ids: TokenSequence(lm.model, ids)  # noqa: E731
    else:
        assert folder is not None
        lm = load_causal_lm(spec, progress=False, weights=False)
        drafter = OnnxDrafter(Path(folder), lm)
        make = drafter.sequence
    load_s = time.perf_counter() - start
    seq = make(_prompt_ids(lm, prompt_tokens, drafter))
    seq.next_logprobs()
    for _ in range(steps):
        seq.push([int(seq.next_logprobs().argmax())])
        seq.next_logprobs()
    return {"load_s": round(load_s, 2), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def _measure_child(backend: str, args: argparse.Namespace, folder: Path | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.device_runtime", "--child", backend, "--specialist", args.specialist]
    command += ["--prompt-tokens", str(args.prompt_tokens)]
    if folder is not None:
        command += ["--onnx-folder", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {backend} child failed: {done.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# --- in this process: interleaved steps, rollback, agreement -----------------------------------


def _interleaved_steps(sequences: dict[str, CachedSequence], steps: int) -> dict[str, list[float]]:
    """Per backend, the seconds of `steps` one-token draft steps (push the argmax, compute the next
    distribution), the backends taking turns in a rotating order."""
    times: dict[str, list[float]] = {name: [] for name in sequences}
    names = list(sequences)
    for step in range(steps):
        for name in names[step % len(names) :] + names[: step % len(names)]:
            seq = sequences[name]
            token = int(seq.next_logprobs().argmax())
            start = time.perf_counter()
            seq.push([token])
            seq.next_logprobs()
            times[name].append(time.perf_counter() - start)
    return times


def _rollback(make: Any, prompt: list[int], reps: int = 5) -> dict[str, float]:
    """Draft 4 tokens, roll 3 back, re-extend with another token: the rollback's cost and how far
    the re-extended distribution is from a fresh sequence's on the same ids."""
    costs, worst = [], 0.0
    for rep in range(reps):
        seq = make(prompt)
        for _ in range(4):
            seq.push([int(seq.next_logprobs().argmax())])
        seq.next_logprobs()
        start = time.perf_counter()
        seq.truncate(len(prompt) + 1)
        seq.push([100 + rep])
        after = np.array(seq.next_logprobs())  # a copy: torch rows and numpy rows alike
        costs.append(time.perf_counter() - start)
        # The same feeds without the rolled-back drafts: a prefill, then one token at a time. (A
        # single prefill of all the ids is not comparable at int4/int8: the quantized MatMul takes
        # another kernel for a multi-token block than for one token.)
        fresh = make(prompt)
        for token in seq.ids[len(prompt) :]:
            fresh.next_logprobs()
            fresh.push([token])
        worst = max(worst, float(np.abs(after - np.asarray(fresh.next_logprobs())).max()))
    return {"rollback_and_step_ms": round(1000 * statistics.median(costs), 1), "max_abs_logprob_diff": worst}


def _agreement(lm: CausalLM, makes: dict[str, Any], prompts: list[list[int]], tokens: int) -> dict[str, float]:
    """Teacher-forced top-1 agreement of each backend with torch on torch's greedy continuations."""
    agree = {name: 0 for name in makes}
    total = 0
    for prompt in prompts:
        ref = TokenSequence(lm.model, prompt)
        path = []
        for _ in range(tokens):
            path.append(int(ref.next_logprobs().argmax()))
            ref.push([path[-1]])
        total += len(path)
        for name, make in makes.items():
            seq = make(prompt)
            for token in path:
                agree[name] += int(seq.next_logprobs().argmax()) == token
                seq.push([token])
    return {name: round(count / total, 4) for name, count in agree.items()}


def _synthetic_adapter(lm: CausalLM, seed: int = 0) -> CausalLM:
    """`lm` with a seeded rank-8 LoRA on the federation's targets merged in (a stand-in for a trained
    personal adapter: random A, B scaled so the deltas are about 1 % of each weight's norm)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    model = get_peft_model(copy.deepcopy(lm.model), config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.01)
    merged = model.merge_and_unload()
    return CausalLM.from_parts(f"{lm.name}+personal", merged, lm.tokenizer)


def run(args: argparse.Namespace, argv: Sequence[str] | None) -> dict[str, Any]:
    precisions = [p for p in args.precisions.split(",") if p]
    onnx_cache = Path(tempfile.mkdtemp(prefix="onnx-bench-")) if args.fresh_conversion else cache_root(args.cache_dir)
    result: dict[str, Any] = {
        "command": "python -m bench.device_runtime " + " ".join(argv if argv is not None else sys.argv[1:]),
        "specialist": args.specialist,
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_avg_start": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "prompt_tokens": args.prompt_tokens,
        "steps": args.steps,
        "backends": {},
    }
    folders = {}
    for precision in precisions:
        folder, seconds = _convert(args.specialist, precision, onnx_cache)
        folders[precision] = folder
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        result["backends"][f"onnx-{precision}"] = {"convert_s": seconds, "model_mb": round(size / 2**20)}
        print(f"onnx-{precision}: {folder} (converted in {seconds} s)" if seconds else f"onnx-{precision}: cached")
    source, _ = onnx_source(args.specialist)
    torch_mb = sum(f.stat().st_size for f in source.glob("*.safetensors"))
    result["backends"] = {"torch-fp32": {"convert_s": None, "model_mb": round(torch_mb / 2**20)}} | result["backends"]

    for name in result["backends"]:
        folder = None if name == "torch-fp32" else folders[name.removeprefix("onnx-")]
        result["backends"][name] |= _measure_child(name, args, folder)
        print(f"{name}: {result['backends'][name]}", flush=True)

    lm = load_causal_lm(args.specialist, progress=False)
    makes: dict[str, Any] = {"torch-fp32": lambda ids: TokenSequence(lm.model, ids)}
    onnx_makes: dict[str, Any] = {}
    for precision, folder in folders.items():
        # One drafter per sequence kind: a drafter holds one live sequence, and the steps interleave.
        onnx_makes[f"onnx-{precision}"] = OnnxDrafter(folder, lm).sequence
    makes |= onnx_makes
    prompt = _prompt_ids(lm, args.prompt_tokens)
    result["prompt_tokens"] = len(prompt)
    sequences: dict[str, CachedSequence] = {}
    for name, make in makes.items():
        start = time.perf_counter()
        sequences[name] = make(prompt)
        sequences[name].next_logprobs()
        result["backends"][name]["prefill_ms"] = round(1000 * (time.perf_counter() - start))
    times = _interleaved_steps(sequences, args.steps)
    torch_steps = np.array(times["torch-fp32"])
    for name, series in times.items():
        entry = result["backends"][name]
        entry["step_ms_median"] = round(1000 * statistics.median(series), 1)
        entry["step_ms_p90"] = round(1000 * float(np.percentile(series, 90)), 1)
        # Step by step against torch's step of the same turn: drift cancels in the ratio.
        entry["torch_step_ratio"] = round(float(np.median(torch_steps / np.array(series))), 2)
    del sequences
    for name, make in makes.items():
        result["backends"][name] |= _rollback(make, prompt)
    agreement = _agreement(lm, onnx_makes, _agreement_prompts(lm), args.agreement_tokens)
    for name, share in agreement.items():
        result["backends"][name]["greedy_agreement"] = share
    result["agreement_positions"] = len(_agreement_prompts(lm)) * args.agreement_tokens

    if args.adapter:
        merged = _synthetic_adapter(lm)
        adapter: dict[str, Any] = {}
        merged_makes = {}
        for precision in precisions:
            start = time.perf_counter()
            drafter = OnnxDrafter.for_loaded(merged, precision=precision, cache_dir=onnx_cache)
            adapter[f"onnx-{precision}"] = {"convert_s": round(time.perf_counter() - start, 1)}
            merged_makes[f"onnx-{precision}"] = drafter.sequence
        shares = _agreement(merged, merged_makes, _agreement_prompts(merged), args.agreement_tokens)
        base_shares = _agreement(merged, {"torch-fp32 base": makes["torch-fp32"]}, _agreement_prompts(lm), 16)
        for name, share in shares.items():
            adapter[name]["greedy_agreement"] = share
        adapter["base_without_adapter_agreement"] = base_shares["torch-fp32 base"]
        result["adapter"] = adapter
    result["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def markdown(result: dict[str, Any]) -> str:
    out = [
        f"# The device's Specialist on torch and onnxruntime-genai: {result['specialist']}",
        "",
        f"`{result['command']}`",
        "",
        f"{result['machine']['cpus']} CPUs, {result['machine']['torch_threads']} threads per backend, "
        f"load average {result['machine']['load_avg_start']} at the start and {result['machine']['load_avg_end']} "
        "at the end (a long benchmark shared the machine: compare the ratios, not the absolute times; on a "
        "loaded 2-core machine torch's OpenMP threads lose most to the contention, so the ratio favours ORT more "
        "than a quiet machine would). "
        f"A draft step is one token at batch 1 after a {result['prompt_tokens']}-token prompt; "
        f"{result['steps']} steps each, the backends taking turns. Peak RSS is a child process that loads "
        "the Specialist as the device does (ORT: the torch model without weights, for the tokenizer) and runs "
        "a prefill and 16 steps. Agreement: teacher-forced top-1 agreement with torch fp32 over "
        f"{result['agreement_positions']} positions of torch's greedy continuations of the demo user's queries.",
        "",
        "| backend | conversion (s) | model on disk (MB) | load (s) | peak RSS (MB) | prefill (ms) | step median (ms) "
        "| step p90 (ms) | torch step / step | rollback + step (ms) | greedy agreement |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, b in result["backends"].items():
        convert = "-" if name.startswith("torch") else ("cached" if b["convert_s"] is None else b["convert_s"])
        agree = b.get("greedy_agreement", 1.0 if name.startswith("torch") else "-")
        out.append(
            f"| {name} | {convert} | {b['model_mb']} | {b['load_s']} | {b['peak_rss_mb']} | {b['prefill_ms']} "
            f"| {b['step_ms_median']} | {b['step_ms_p90']} | {b['torch_step_ratio']} | {b['rollback_and_step_ms']} "
            f"| {agree} |"
        )
    out.append("")
    out.append(
        "Rollback: 4 drafted tokens, 3 rolled back, one new token fed; the re-extended distribution's largest "
        "difference from a fresh sequence fed the same ids the same way (prefill, then one token at a time): "
        + ", ".join(f"{n} {b['max_abs_logprob_diff']:.1e}" for n, b in result["backends"].items())
        + "."
    )
    if "adapter" in result:
        a = result["adapter"]
        out += [
            "",
            "## With a LoRA adapter merged in",
            "",
            "A seeded rank-8 LoRA on all seven projection types (B ~ N(0, 0.01²); a stand-in for a trained "
            "personal adapter) merged into the torch model, converted as `--federation-state` converts it "
            "(`OnnxDrafter.for_loaded`); agreement with the torch model with the same adapter merged:",
            "",
            "| backend | conversion (s) | greedy agreement |",
            "|---|---|---|",
        ]
        out += [f"| {n} | {v['convert_s']} | {v['greedy_agreement']} |" for n, v in a.items() if isinstance(v, dict)]
        out.append("")
        out.append(
            f"For scale: the base model without the adapter agrees with the merged one on "
            f"{a['base_without_adapter_agreement']} of positions."
        )
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.device_runtime", description=__doc__.split("\n")[0])
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--precisions", default="int4,int8", help="ONNX precisions, comma-separated (int4, int8, fp32)")
    p.add_argument("--prompt-tokens", type=int, default=300)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--agreement-tokens", type=int, default=48, help="greedy tokens per demo query")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--fresh-conversion", action="store_true", help="convert into a new cache, to time it")
    p.add_argument("--adapter", action="store_true", help="also a synthetic LoRA merged in, converted and compared")
    p.add_argument("--out", type=Path, default=OUT, help="writes OUT.md and OUT.json")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--onnx-folder", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.specialist, args.onnx_folder, args.prompt_tokens, 16)))
        return 0
    result = run(args, argv)
    page = markdown(result)
    print(page)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
