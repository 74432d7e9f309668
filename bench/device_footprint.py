"""The device process as an app ships it: `sdk generate --server ...` against a live verifier over
mutual TLS, measured for peak resident memory, load time and draft step, per device runtime.

    python -m bench.device_footprint                          # onnx int4 (the default) beside torch
    python -m bench.device_footprint --runtimes onnx:int4 onnx:int8 torch --reps 3

A throwaway PKI and one `server serve` on loopback (the default pair, as `sdk demo` starts it)
serve every run. Each run is a fresh `python -m sdk.cli generate` child, the demo user's first
query with its private profile, greedy; the runtimes take turns, run by run, so each sees the
same spells of machine load. Peak RSS is the child's `ru_maxrss` from `wait4` (what
`/usr/bin/time -f %M` prints). Load time is the child's wall time less its generation's own
seconds (interpreter, imports, tokenizer, model, pin set). The draft step is the median of the
Specialist's forwards after its prefill (`device_step_ms` in `sdk generate --json`'s stats).
One warm-up run per runtime first converts what it needs (the ONNX cache) and is not counted.
Writes docs/results/device_footprint.{md,json} (or `--out`).
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

from bench.speed_timing import DEMO
from demo.run import verifier_process
from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
from specsteer.core.prompts import task_prompt
from specsteer.server.pki import Pki, init_pki, issue_device

__all__ = ["main"]

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "device_footprint"
BUDGET_MB = 1024


def _runtime_args(runtime: str) -> list[str]:
    kind, _, precision = runtime.partition(":")
    return ["--drafter", kind] + (["--drafter-precision", precision] if precision else [])


def _device_run(argv: list[str]) -> dict[str, Any]:
    """One `sdk generate` child: its JSON result, peak RSS (MB) and wall time."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "specsteer.sdk.cli", *argv],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "GRPC_VERBOSITY": "ERROR"},
        )
        _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): wait4 also gives its rusage
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"sdk generate failed: {tail[0]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    stats = result["stats"]
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "wall_s": round(wall, 2),
        "load_s": round(wall - stats["seconds"], 2),
        "generation_s": stats["seconds"],
        "device_prefill_ms": stats.get("device_prefill_ms"),
        "device_step_ms": stats.get("device_step_ms"),
        "new_tokens": stats["new_tokens"],
        "acceptance_rate": stats["acceptance_rate"],
        "fallback": stats["fallback"],
        "text": result["text"],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    prompt = task_prompt(demo["queries"][0]["subject"])
    with tempfile.TemporaryDirectory(prefix="specsteer-footprint-") as tmp:
        pki: Pki = init_pki(Path(tmp) / "pki")
        issue_device(pki.directory, "bench-device")
        serve = argparse.Namespace(
            seed=0, generalist=args.generalist, specialist=args.specialist, cache_dir=args.cache_dir
        )
        with verifier_process(serve, pki.directory) as ready:
            port = ready()
            base = ["generate", "--server", f"127.0.0.1:{port}", "--pins", str(pki.pins)]
            base += ["--cert", str(pki.device_cert("bench-device")), "--key", str(pki.device_key("bench-device"))]
            base += ["--specialist", args.specialist, "--profile", str(DEMO), "--prompt", prompt]
            base += ["--max-new-tokens", str(args.max_new_tokens), "--json", "--no-fallback"]
            if args.cache_dir is not None:
                base += ["--cache-dir", str(args.cache_dir)]
            for runtime in args.runtimes:
                print(f"warm-up {runtime}", file=sys.stderr, flush=True)
                _device_run([*base, *_runtime_args(runtime)])
            runs: dict[str, list[dict[str, Any]]] = {r: [] for r in args.runtimes}
            for rep in range(args.reps):
                for runtime in args.runtimes:
                    got = _device_run([*base, *_runtime_args(runtime)])
                    runs[runtime].append(got)
                    print(
                        f"[{rep + 1}/{args.reps}] {runtime}: {got['peak_rss_mb']} MB, load {got['load_s']} s, "
                        f"step {got['device_step_ms']} ms",
                        file=sys.stderr,
                        flush=True,
                    )
    return {
        "command": "python -m bench.device_footprint " + " ".join(args.argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
        "specialist": args.specialist,
        "generalist": args.generalist,
        "max_new_tokens": args.max_new_tokens,
        "budget_mb": BUDGET_MB,
        "runtimes": {r: {"median": _medians(rs), "runs": rs} for r, rs in runs.items()},
    }


def _medians(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = ("peak_rss_mb", "load_s", "device_prefill_ms", "device_step_ms", "generation_s")
    return {k: statistics.median(r[k] for r in runs) if all(r[k] is not None for r in runs) else None for k in keys}


def markdown(result: dict[str, Any]) -> str:
    rows = result["runtimes"]
    reference = rows.get("torch", {}).get("median")
    lines = [
        "# The device process's footprint, per runtime",
        "",
        f"`{result['command']}`",
        "",
        f"`sdk generate --server ...` against a live verifier (mutual TLS, loopback), Specialist "
        f"{result['specialist']}, Generalist {result['generalist']}, the demo user's first query with "
        f"its profile, {result['max_new_tokens']} new tokens at most, greedy. {result['machine']}. "
        "Medians of the runs; peak RSS is the device process's `ru_maxrss`.",
        "",
        "| runtime | peak RSS | within 1 GB | load | prefill | draft step | step vs torch |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        m = row["median"]
        ratio = (
            f"{m['device_step_ms'] / reference['device_step_ms']:.2f}x"
            if reference and m["device_step_ms"] and reference["device_step_ms"]
            else "-"
        )
        within = "yes" if m["peak_rss_mb"] <= result["budget_mb"] else "no"
        lines.append(
            f"| {name} | {m['peak_rss_mb']:.0f} MB | {within} | {m['load_s']:.1f} s | "
            f"{_ms(m['device_prefill_ms'])} | {_ms(m['device_step_ms'])} | {ratio} |"
        )
    lines += ["", "Every run, in order:", ""]
    lines += ["| runtime | peak RSS | load | step | tokens | acceptance |", "|---|---|---|---|---|---|"]
    for name, row in rows.items():
        for r in row["runs"]:
            lines.append(
                f"| {name} | {r['peak_rss_mb']} MB | {r['load_s']} s | {_ms(r['device_step_ms'])} | "
                f"{r['new_tokens']} | {r['acceptance_rate']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.device_footprint", description=__doc__.split("\n")[0])
    p.add_argument("--runtimes", nargs="+", default=["onnx:int4", "torch"], help="drafter[:precision], in turn")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=OUT, help="writes OUT.md and OUT.json")
    args = p.parse_args(words)
    args.argv = words
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    page = markdown(result)
    args.out.with_suffix(".md").write_text(page, encoding="utf-8")
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
