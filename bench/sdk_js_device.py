"""The TypeScript device's drafter beside the Python device's on the same machine: peak resident
memory, load time and draft step on the default bundle (the embedded Specialist's int4 ONNX graph).

    python -m bench.sdk_js_device                    # 3 runs each, TS and Python in turn
    python -m bench.sdk_js_device --runs 3 --steps 32 --reps 3 --threads 2
    python -m bench.sdk_js_device --from-json docs/results/sdk_js_device.json   # the page again

Needs the default bundle (`make install` builds it) and the TypeScript build
(`cd sdk-js && npm run build`: the child is sdk-js/dist/test/bench-draft.js).

Each run is a fresh child process, so its peak RSS (`ru_maxrss` from `wait4`, what
`/usr/bin/time -f %M` prints) is its own: `node sdk-js/dist/test/bench-draft.js` (onnxruntime-node,
sdk-js/src/node/drafter.ts) or `python -m bench.sdk_js_device --child` (onnxruntime-genai,
sdk/onnx_drafter.py through `sdk.bundles`, as `sdk generate` loads it). The runtimes take turns,
run by run (TS, Python, TS, Python), so each sees the same spells of machine load. Both load the
bundle as their device does (every file's hash checked, the tokenizer and chat template, the
drafter), prefill the same token IDs (a conformance/v1/prompts/render.json case: by default the
demo's first query with the examples the SDK retrieved for it, rendered with the chat template),
draft one untimed warm-up round, then `--reps` rounds of `--steps` greedy draft steps from the
prompt. A draft step is one forward of the last drafted token over the cached prefix and the
argmax of its log-probabilities. Load is the child's wall time from spawn to a loaded drafter
(interpreter, imports, hash check, tokenizer, model). Every run's greedy tokens are compared.
Writes docs/results/sdk_js_device.{md,json} (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "markdown", "summarize"]

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "sdk_js_device"
RENDER = ROOT / "conformance" / "v1" / "prompts" / "render.json"
SDK_JS = ROOT / "sdk-js"
TS_CHILD = SDK_JS / "dist" / "test" / "bench-draft.js"
RUNTIMES = ("typescript", "python")


# --- the Python child -----------------------------------------------------------------------------


def _child(bundle: str, ids_file: str, steps: int, reps: int, threads: int) -> dict[str, Any]:
    """The Python device's drafter alone, as sdk-js/test/bench-draft.ts runs the TypeScript one."""
    from dataclasses import replace

    import numpy as np

    from specsteer.core.bundle import open_bundle
    from specsteer.core.device_lm import load_device_lm
    from specsteer.core.sequence import log_softmax_np
    from specsteer.sdk.decoding import CAPACITY_MARGIN
    from specsteer.sdk.onnx_drafter import OnnxDrafter

    ids = json.loads(Path(ids_file).read_text(encoding="utf-8"))
    # `sdk.bundles.load_bundle`'s three steps, timed one by one.
    t = time.perf_counter()
    opened = open_bundle(Path(bundle))  # the manifest's hashes, every file
    open_ms = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    lm = replace(load_device_lm(opened.folder, progress=False), name=opened.name)
    tokenizer_ms = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    drafter = OnnxDrafter(opened.onnx_folder, lm, threads=threads)
    drafter_ms = (time.perf_counter() - t) * 1e3
    ready = time.time()

    # The KV cache is allocated up front for what the generation can reach, as `sdk.decoding.generate` asks.
    seq = drafter.sequence(ids, capacity=len(ids) + steps + 1 + CAPACITY_MARGIN)
    t = time.perf_counter()
    seq.next_logprobs()
    prefill_ms = (time.perf_counter() - t) * 1e3

    def one_round(times: list[float] | None) -> list[int]:
        seq.truncate(len(ids))
        drafted = [int(np.argmax(seq.next_logprobs()))]
        for _ in range(steps):
            start = time.perf_counter()
            seq.push([drafted[-1]])
            drafted.append(int(np.argmax(seq.next_logprobs())))
            if times is not None:
                times.append((time.perf_counter() - start) * 1e3)
        return drafted

    warmup = one_round(None)
    step_ms: list[float] = []
    rounds = [one_round(step_ms) for _ in range(reps)]
    # The step's work outside the runtime, alone: log-softmax and argmax of one vocabulary row.
    row = np.asarray(seq.next_logprobs(), dtype=np.float32).reshape(1, -1)
    row_ms: list[float] = []
    for i in range(60):
        start = time.perf_counter()
        np.argmax(log_softmax_np(row))
        if i >= 10:
            row_ms.append((time.perf_counter() - start) * 1e3)
    import onnxruntime_genai as og  # type: ignore[import-untyped, import-not-found, unused-ignore]

    return {
        "runtime": f"onnxruntime-genai {og.__version__} on Python {platform.python_version()}",
        "ready_unix": ready,
        "load_ms": {"open_verify": open_ms, "tokenizer": tokenizer_ms, "drafter": drafter_ms},
        "prefill_ms": prefill_ms,
        "step_ms": step_ms,
        "row_ms": row_ms,
        "vocab": int(row.shape[1]),
        "drafted": warmup,
        "rounds_agree": all(r == warmup for r in rounds),
        "vm_hwm_mb": _vm_hwm_mb(),
    }


def _vm_hwm_mb() -> float | None:
    """The kernel's peak resident set of this process, read at the end of the run."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


# --- the parent -------------------------------------------------------------------------------------


def _spawn(argv: list[str], cwd: Path) -> dict[str, Any]:
    """One child: its JSON line, peak RSS (MB, from wait4), wall time and load (spawn to ready)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        spawned = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): wait4 also gives its rusage
        code = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if code != 0:
        tail = stderr.strip().splitlines()[-3:] or ["(no output)"]
        raise RuntimeError(f"{' '.join(argv[:2])} exited {code}: " + " | ".join(tail))
    got: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    got["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    got["wall_s"] = round(wall, 2)
    got["load_s"] = round(got.pop("ready_unix") - spawned, 2)
    return got


def _prompt_ids(case: str) -> tuple[list[int], dict[str, Any]]:
    doc = json.loads(RENDER.read_text(encoding="utf-8"))
    for v in doc["vectors"]:
        if v["name"] == case:
            return [int(i) for i in v["expected"]["token_ids"]], doc["model"]
    raise SystemExit(f"no case {case!r} in {RENDER}; choose one of: {', '.join(v['name'] for v in doc['vectors'])}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from specsteer.core.model_registry import DEFAULT_SPECIALIST
    from specsteer.sdk.bundles import default_bundle_path

    ids, model = _prompt_ids(args.case)
    bundle = args.bundle or default_bundle_path(DEFAULT_SPECIALIST, model["precision"])
    manifest = json.loads((bundle / "specsteer-bundle.json").read_text(encoding="utf-8"))
    if any(manifest["files"].get(k) != v for k, v in model["files"].items()):
        raise SystemExit(f"{bundle}'s tokenizer is not the one {RENDER.name}'s token IDs came from")
    if not TS_CHILD.is_file():
        built = TS_CHILD.relative_to(ROOT)
        raise SystemExit(f"no {built}: build the TypeScript device first (cd sdk-js && npm run build)")
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in RUNTIMES}
    with tempfile.TemporaryDirectory(prefix="specsteer-sdk-js-bench-") as tmp:
        ids_file = Path(tmp) / "ids.json"
        ids_file.write_text(json.dumps(ids), encoding="utf-8")
        tail = [str(bundle), str(ids_file), str(args.steps), str(args.reps), str(args.threads)]
        commands = {
            "typescript": (["node", str(TS_CHILD), *tail], SDK_JS),
            "python": ([sys.executable, "-m", "bench.sdk_js_device", "--child", *tail], ROOT),
        }
        for n in range(args.runs):
            for runtime in RUNTIMES:  # in turn, so both see the same spells of machine load
                argv, cwd = commands[runtime]
                got = _spawn(argv, cwd)
                runs[runtime].append(got)
                print(
                    f"[{n + 1}/{args.runs}] {runtime}: {got['peak_rss_mb']:.0f} MB, load {got['load_s']} s, "
                    f"step median {statistics.median(got['step_ms']):.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    return {
        "command": " ".join(["python -m bench.sdk_js_device", *args.argv]),
        "machine": {
            "platform": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            "load_average_before": round(load_before, 2),
            "load_average_after": round(os.getloadavg()[0], 2),
            "shared": "yes: the machine ran other benchmarks and builds meanwhile",
        },
        "bundle": str(bundle),
        "files": {k: v for k, v in manifest["files"].items() if k.startswith("onnx/model.onnx")},
        "prompt": {"case": args.case, "source": str(RENDER.relative_to(ROOT)), "tokens": len(ids)},
        "steps": args.steps,
        "reps": args.reps,
        "threads": args.threads,
        "runs": runs,
        "summary": summarize(runs),
    }


def _p90(xs: Sequence[float]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[8] if len(xs) > 1 else xs[0]


def _median_of(lists: Any) -> float | None:
    pooled = [x for xs in lists if xs for x in xs]
    return round(statistics.median(pooled), 3) if pooled else None


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per runtime: every run's draft steps pooled (median, p90), and medians over the runs of
    load, prefill and peak RSS; TS/Python ratios; whether every run drafted the same tokens."""
    out: dict[str, Any] = {}
    for runtime, rs in runs.items():
        steps = [s for r in rs for s in r["step_ms"]]
        out[runtime] = {
            "runtime": rs[0]["runtime"],
            "runs": len(rs),
            "step_ms_median": round(statistics.median(steps), 2),
            "step_ms_p90": round(_p90(steps), 2),
            "prefill_ms_median": round(statistics.median(r["prefill_ms"] for r in rs), 1),
            "row_ms_median": _median_of(r.get("row_ms") for r in rs),
            "load_s_median": round(statistics.median(r["load_s"] for r in rs), 2),
            "peak_rss_mb_median": round(statistics.median(r["peak_rss_mb"] for r in rs), 1),
            "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rs),
        }
    ts, py = out.get("typescript"), out.get("python")
    if ts and py:
        out["ratio_ts_over_python"] = {
            k: round(ts[k] / py[k], 2)
            for k in ("step_ms_median", "step_ms_p90", "prefill_ms_median", "load_s_median", "peak_rss_mb_median")
        }
    drafts = [r["drafted"] for rs in runs.values() for r in rs]
    out["same_greedy_tokens"] = all(d == drafts[0] for d in drafts) and all(
        r["rounds_agree"] for rs in runs.values() for r in rs
    )
    if not out["same_greedy_tokens"]:
        first = drafts[0]
        out["first_divergence"] = min(
            (next((i for i, (a, b) in enumerate(zip(first, d, strict=False)) if a != b), len(d)) for d in drafts[1:]),
            default=None,
        )
    out["drafted_tokens"] = len(drafts[0]) if drafts else 0
    out["vocab"] = next((r["vocab"] for rs in runs.values() for r in rs if "vocab" in r), 0)
    return out


def markdown(result: dict[str, Any]) -> str:
    s, m = result["summary"], result["machine"]
    names = {"typescript": "TypeScript (sdk-js)", "python": "Python (sdk)"}
    lines = [
        "# The TypeScript device's drafter beside the Python device's",
        "",
        f"`{result['command']}`",
        "",
        f"The default bundle's int4 ONNX Specialist ({result['bundle']}), each run a fresh child process, the "
        f"runtimes in turn ({result['steps']} greedy draft steps x {result['reps']} rounds after one warm-up "
        f"round, per run; {result['threads']} threads each). Prompt: `{result['prompt']['case']}` of "
        f"{result['prompt']['source']}, {result['prompt']['tokens']} token IDs, the same for both. "
        f"{m['platform']}.",
        "",
        f"**The machine is shared**: other benchmarks and builds ran meanwhile (load average "
        f"{m['load_average_before']} before, {m['load_average_after']} after, on {m['platform'].split(', ')[1]}), "
        "so the absolute times are slower and noisier than on an idle machine; the runtimes took turns run by "
        "run, so the ratios are the fairer reading. Peak RSS does not depend on the load.",
        "",
        "| device | runtime | peak RSS | load | prefill | draft step median | draft step p90 |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in RUNTIMES:
        if key in s:
            r = s[key]
            lines.append(
                f"| {names[key]} | {r['runtime']} | {r['peak_rss_mb_median']:.0f} MB | {r['load_s_median']:.1f} s | "
                f"{r['prefill_ms_median']:.0f} ms | {r['step_ms_median']:.1f} ms | {r['step_ms_p90']:.1f} ms |"
            )
    if "ratio_ts_over_python" in s:
        q = s["ratio_ts_over_python"]
        lines.append(
            f"| TS / Python | | {q['peak_rss_mb_median']:.2f}x | {q['load_s_median']:.2f}x | "
            f"{q['prefill_ms_median']:.2f}x | {q['step_ms_median']:.2f}x | {q['step_ms_p90']:.2f}x |"
        )
    same = (
        f"yes, every run of both drafted the same {s['drafted_tokens']} greedy tokens"
        if s["same_greedy_tokens"]
        else f"NO: the drafts part at token {s.get('first_divergence')}"
    )
    lines += ["", f"Same greedy tokens: {same}.", ""]
    if all(s.get(k, {}).get("row_ms_median") is not None for k in RUNTIMES):
        ts_row, py_row = s["typescript"]["row_ms_median"], s["python"]["row_ms_median"]
        lines += [
            f"Of a draft step, the work outside the ONNX runtime (log-softmax and argmax of one "
            f"{s.get('vocab', 0):,}-logit row, timed alone 50 times per run after the rounds): "
            f"{ts_row:.2f} ms in TypeScript (a JavaScript loop, `logSoftmax` of src/drafter.ts), "
            f"{py_row:.2f} ms in Python (numpy), so {ts_row - py_row:.1f} ms of the TypeScript step's "
            f"{s['typescript']['step_ms_median'] - s['python']['step_ms_median']:.1f} ms excess (medians).",
            "",
        ]
    heaps = [r["node_memory_mb"] for r in result["runs"].get("typescript", []) if "node_memory_mb" in r]
    if heaps:
        lines += [
            f"Node's own memory at the end of the TypeScript runs (median): V8 heap "
            f"{statistics.median(h['heapUsed'] for h in heaps):.0f} MB used of "
            f"{statistics.median(h['heapTotal'] for h in heaps):.0f} MB, array buffers "
            f"{statistics.median(h['arrayBuffers'] for h in heaps):.0f} MB (`process.memoryUsage()`).",
            "",
        ]
    lines += [
        "Peak RSS is the child's `ru_maxrss` (wait4); load is spawn to a loaded drafter (interpreter or Node "
        "start, imports, every bundle file's hash checked, tokenizer and chat template, the ONNX session); "
        "a draft step is one forward of the last drafted token over the cached prompt and the argmax of its "
        "log-probabilities, pooled over every timed round of every run. The Python drafter runs "
        "onnxruntime-genai with its KV cache allocated up front for the generation (prompt + steps + 64, as "
        "`sdk generate` asks); the TypeScript drafter runs onnxruntime-node's `InferenceSession` on the same "
        "graph, its KV cache grown by each forward.",
        "",
        "Every run, in order:",
        "",
        "| run | device | peak RSS | VmHWM | load | open+verify | tokenizer | drafter | prefill | step median |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    count = max((len(v) for v in result["runs"].values()), default=0)
    for n in range(count):
        for key in RUNTIMES:
            rs = result["runs"].get(key, [])
            if n < len(rs):
                r = rs[n]
                hwm = "-" if r.get("vm_hwm_mb") is None else f"{r['vm_hwm_mb']:.0f} MB"
                lm = r["load_ms"]
                lines.append(
                    f"| {n + 1} | {names[key]} | {r['peak_rss_mb']:.0f} MB | {hwm} | {r['load_s']:.1f} s | "
                    f"{lm['open_verify'] / 1e3:.1f} s | {lm['tokenizer'] / 1e3:.2f} s | {lm['drafter'] / 1e3:.1f} s | "
                    f"{r['prefill_ms']:.0f} ms | {statistics.median(r['step_ms']):.1f} ms |"
                )
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.sdk_js_device", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3, help="child processes per runtime, in turn")
    p.add_argument("--steps", type=int, default=32, help="timed draft steps per round")
    p.add_argument("--reps", type=int, default=3, help="timed rounds per run, after one warm-up round")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of each runtime")
    p.add_argument("--case", default="demo-query-0", help="the prompts/render.json case whose token IDs both prefill")
    p.add_argument("--bundle", type=Path, default=None, help="a bundle folder (default: the default Specialist's)")
    p.add_argument("--out", type=Path, default=OUT, help="writes OUT.md and OUT.json")
    p.add_argument("--from-json", type=Path, default=None, help="render the page of an earlier result only")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["--child"]:  # bundle ids steps reps threads: one Python device, for the parent
        bundle, ids_file, steps, reps, threads = words[1:6]
        print(json.dumps(_child(bundle, ids_file, int(steps), int(reps), int(threads))), flush=True)
        return 0
    args = _parser().parse_args(words)
    args.argv = words
    if args.from_json is not None:
        result = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        result = run(args)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    page = markdown(result)
    if args.from_json is None:
        args.out.with_suffix(".md").write_text(page, encoding="utf-8")
    print(page, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
