"""Verifier under load: N concurrent device sessions against one `server serve` process, with
cross-session batching on and off.

    python -m bench.load [--sessions 1 4 16 32] [--batching off on] [--max-batch 8] [--max-new-tokens 16]
                         [--cloud-device cuda --cloud-dtype bfloat16 --kv slots [--kv-compile]] [--out docs/results]

For each batching mode a verifier runs as its own process (mutual TLS on loopback, a throwaway
PKI, `--batching on|off`), so its memory is measured alone (VmRSS from /proc, sampled while the
sessions run). N device threads share one Specialist model (each session has its own KV cache)
and one TLS channel, and each generates the demo user's first query. Reported per N and mode:
sessions/s, committed tokens/s, round latency p50/p99 as the device sees it, the verifier's peak
memory and its growth per concurrent session (from after a warm-up session), the mean number of
sequences per model forward and the forwards run alone because the model did not allow a merge
(both from the verifier's Prometheus metrics), and errors (none allowed: the run fails if any
session errs or falls back).

All N simulated devices share the verifier's 2 cores, so the verifier's idle timeout is raised to
900 s for this run (a device's own drafting must not count as an idle client).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from bench.plotting import figure, plotted
from specsteer.core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, load_causal_lm
from specsteer.core.placement import DTYPE_CHOICES
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import SessionParams
from specsteer.sdk.client import ClientConfig, SpecSteerClient
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Specialist

DEMO = Path(__file__).resolve().parents[1] / "sdk" / "data" / "demo_profile.json"


class TimedVerifier:
    """Wraps a verifier so every round's latency is recorded (seconds)."""

    def __init__(self, inner, latencies: list[float], lock: threading.Lock) -> None:
        self.inner, self.latencies, self.lock = inner, latencies, lock

    def open(self, prompt_ids, params):
        session = self.inner.open(prompt_ids, params)
        timed_round = session.round

        def round_(commit, draft, *rest):  # rest: whatever else a round carries (e.g. a guard placeholder)
            start = time.perf_counter()
            verdict = timed_round(commit, draft, *rest)
            with self.lock:
                self.latencies.append(time.perf_counter() - start)
            return verdict

        session.round = round_
        return session


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.load", description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--batching", nargs="+", choices=["on", "off"], default=["off", "on"])
    p.add_argument("--max-batch", type=int, default=8, help="the verifier's --max-batch when batching is on")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    # The verifier's placement and KV engine, passed to `server serve` as they are (docs/gpu.md).
    p.add_argument("--cloud-device", default="cpu", help="where the verifier's models run: cpu (default), cuda")
    p.add_argument("--cloud-dtype", default="float32", choices=DTYPE_CHOICES, help="their weights")
    p.add_argument("--kv", choices=("dynamic", "slots"), default="dynamic", help="the verifier's KV engine")
    p.add_argument("--kv-compile", action="store_true", help="--kv slots: compile the pool's forward")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    specialist = Specialist(load_causal_lm(args.specialist), Profile.from_obj(demo, source=str(DEMO)))
    prompt = task_prompt(demo["queries"][0]["subject"])
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    rows: list[dict] = []
    idle: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="specsteer-load-") as tmp:
        for mode in args.batching:
            # One verifier process per mode, so neither inherits the other's memory or threads.
            idle[mode] = _serve_and_run(specialist, prompt, options, args, mode, Path(tmp) / mode, rows)
    rows.sort(key=lambda r: (r["sessions"], r["batching"]))
    meta = {
        "command": "python -m bench.load " + " ".join(argv if argv is not None else sys.argv[1:]),
        "max_new_tokens": args.max_new_tokens,
        "max_batch": args.max_batch,
        "verifier_idle_rss_mb": idle,
        "pair": f"{args.specialist} -> {args.generalist}",
        "cloud": {"device": args.cloud_device, "dtype": args.cloud_dtype, "kv": args.kv, "kv_compile": args.kv_compile},
    }
    (args.out / "load.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (args.out / "load.md").write_text(_markdown(rows, meta))
    png = plotted(lambda: _plot(rows, args.out / "load.png"), "load.png")
    errors = sum(r["errors"] for r in rows)
    print(f"wrote {args.out}/load.md, load.json{png}; errors: {errors}")
    return 1 if errors else 0


def _serve_and_run(
    specialist: Specialist,
    prompt: str,
    options: DecodeOptions,
    args: argparse.Namespace,
    mode: str,
    root: Path,
    rows: list[dict],
) -> float:
    """Start a verifier with batching `mode`, run every N against it; returns its idle RSS (MB)."""
    from demo.run import verifier_process  # the demo's way of running `server serve` on loopback
    from specsteer.server.pki import init_pki, issue_device

    pki = init_pki(root / "pki")
    cert, key = issue_device(pki.directory, "load")
    server_args = argparse.Namespace(seed=0, generalist=args.generalist, specialist=args.specialist, cache_dir=None)
    metrics_port = _free_port()
    extra = verifier_options(args, mode, metrics_port)
    with verifier_process(server_args, pki.directory, extra=extra) as ready:
        port = ready()
        pid = _server_pid(port)
        if _scrape(metrics_port).get("specsteer_batching_enabled") != (1.0 if mode == "on" else 0.0):
            raise RuntimeError(f"the verifier did not start with batching {mode}")
        config = ClientConfig(server=f"127.0.0.1:{port}", pins=pki.pins, cert=cert, key=key, round_timeout=600)
        with SpecSteerClient.connect(specialist, config, params=SessionParams(), options=options) as client:
            # One session first: the verifier's first forward passes allocate buffers it keeps,
            # which belong to no session; memory per session is measured from after it.
            client.generate(prompt)
            idle_mb = rss_mb(pid)
            for n in args.sessions:
                before = _scrape(metrics_port)
                row = _run(client, prompt, n, pid, idle_mb)
                row.update(batching=mode, **_forwards(before, _scrape(metrics_port)))
                rows.append(row)
                print(json.dumps(row), flush=True)
    return idle_mb


def verifier_options(args: argparse.Namespace, mode: str, metrics_port: int) -> list[str]:
    """The `server serve` options of the run's verifier (batching `mode`), beyond its models and PKI."""
    # Every simulated session uses one device certificate: lift the per-device cap to N.
    # And all N devices draft on this machine's 2 cores, beside the verifier: a device can take
    # longer than the default 60 s idle timeout between its rounds, which real devices would not.
    extra = ["--max-sessions-per-device", str(max(args.sessions)), "--idle-timeout", "900"]
    # One certificate: no newcomer to reserve slots for. Sessions past the cap queue for a slot
    # (none falls back as verifier-busy), and on 2 shared cores a slot can take minutes to free.
    extra += ["--reserved-sessions", "0", "--queue-timeout", "900", "--max-queued-opens", str(max(args.sessions))]
    extra += ["--batching", mode, "--max-batch", str(args.max_batch), "--metrics-port", str(metrics_port)]
    extra += ["--device", args.cloud_device, "--dtype", args.cloud_dtype, "--kv", args.kv]
    extra += ["--kv-slots", str(max(args.sessions) + 1)] if args.kv == "slots" else []  # + the warm-up session
    extra += ["--kv-compile"] if args.kv_compile else []
    return extra


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    """The verifier's metrics this benchmark reads: batch sizes, unmerged forwards, the batching switch."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith("specsteer_unmerged_forwards_total{"):
            out["unmerged"] = out.get("unmerged", 0.0) + float(value)
        elif name in ("specsteer_batch_size_sum", "specsteer_batch_size_count", "specsteer_batching_enabled"):
            out[name] = float(value)
    return out


def _forwards(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Model forwards during one run, the mean sequences per forward, and those run alone by necessity."""
    count = after.get("specsteer_batch_size_count", 0.0) - before.get("specsteer_batch_size_count", 0.0)
    total = after.get("specsteer_batch_size_sum", 0.0) - before.get("specsteer_batch_size_sum", 0.0)
    return {
        "forwards": count,
        "mean_batch_size": total / count if count else float("nan"),
        "unmerged_forwards": after.get("unmerged", 0.0) - before.get("unmerged", 0.0),
    }


def _server_pid(port: int) -> int:
    """The `server serve` process listening on `port` (found through /proc, no psutil)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # LISTEN
                inodes.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                link = fd.readlink().as_posix()
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    raise RuntimeError(f"no process listens on port {port}")


def _run(client: SpecSteerClient, prompt: str, n: int, pid: int, idle_mb: float) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    inner = client.verifier
    client.verifier = TimedVerifier(inner, latencies, lock)
    results: list = []
    errors: list[str] = []
    peak = [rss_mb(pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], rss_mb(pid))

    def one() -> None:
        try:
            out = client.generate(prompt)
            if out.stats.fallback:
                errors.append(f"fallback: {out.stats.fallback}")
            with lock:
                results.append(out)
        except Exception as exc:
            errors.append(str(exc))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=one) for _ in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    done.set()
    client.verifier = inner
    tokens = sum(r.stats.new_tokens for r in results)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else (latencies or [float("nan")]) * 99
    return {
        "sessions": n,
        "wall_seconds": wall,
        "sessions_per_second": n / wall,
        "tokens_per_second": tokens / wall,
        "rounds": len(latencies),
        "round_p50_ms": q[49] * 1000,
        "round_p99_ms": q[98] * 1000,
        "verifier_peak_rss_mb": peak[0],
        "rss_growth_per_session_mb": (peak[0] - idle_mb) / n,
        "errors": len(errors),
        "error_examples": errors[:3],
    }


def _markdown(rows: list[dict], meta: dict) -> str:
    idle = ", ".join(f"batching {mode} {mb:.0f} MB" for mode, mb in meta["verifier_idle_rss_mb"].items())
    out = [
        f"# Verifier under load (one `server serve` per batching mode, mutual TLS, {meta['pair']})",
        "",
        f"`{meta['command']}` — each session generates the demo user's first query "
        f"({meta['max_new_tokens']} new tokens, specsteer defaults); batching on merges up to "
        f"{meta['max_batch']} sequences per forward. Verifier RSS after one warm-up session: {idle}. "
        "Mean batch: sequences per model forward (server metrics); unmerged: forwards that ran alone "
        "because the model did not allow a merge (Gemma 3 beyond its sliding window).",
        "",
        "| sessions | batching | wall s | sessions/s | tokens/s | rounds | round p50 ms | round p99 ms | "
        "forwards | mean batch | unmerged | verifier peak RSS MB | RSS growth / session MB | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['sessions']} | {r['batching']} | {r['wall_seconds']:.1f} | {r['sessions_per_second']:.3f} | "
            f"{r['tokens_per_second']:.2f} | {r['rounds']} | {r['round_p50_ms']:.0f} | {r['round_p99_ms']:.0f} | "
            f"{r['forwards']:.0f} | {r['mean_batch_size']:.2f} | {r['unmerged_forwards']:.0f} | "
            f"{r['verifier_peak_rss_mb']:.0f} | {r['rss_growth_per_session_mb']:.1f} | {r['errors']} |"
        )
    ratios = _on_off(rows)
    if ratios:
        out += ["", "Batching on vs off, per N: tokens/s ratio, round p50 ratio (below 1: faster with batching)."]
        out += [""] + [f"- N={n}: tokens/s x{tps:.2f}, round p50 x{p50:.2f}" for n, tps, p50 in ratios]
    return "\n".join(out) + "\n"


def _on_off(rows: list[dict]) -> list[tuple[int, float, float]]:
    by = {(r["sessions"], r["batching"]): r for r in rows}
    out = []
    for n in sorted({r["sessions"] for r in rows}):
        on, off = by.get((n, "on")), by.get((n, "off"))
        if on and off and off["tokens_per_second"] and off["round_p50_ms"]:
            out.append(
                (n, on["tokens_per_second"] / off["tokens_per_second"], on["round_p50_ms"] / off["round_p50_ms"])
            )
    return out


def _plot(rows: list[dict], path: Path) -> None:
    with figure(path, (11, 4), ncols=2) as (latency, throughput):
        for mode, style in (("off", "--"), ("on", "-")):
            mine = [r for r in rows if r["batching"] == mode]
            if not mine:
                continue
            ns = [r["sessions"] for r in mine]
            latency.plot(ns, [r["round_p50_ms"] for r in mine], style, marker="o", label=f"p50, batching {mode}")
            latency.plot(ns, [r["round_p99_ms"] for r in mine], style, marker="^", label=f"p99, batching {mode}")
            throughput.plot(ns, [r["tokens_per_second"] for r in mine], style, marker="o", label=f"batching {mode}")
            if mode == "on":
                for r in mine:
                    throughput.annotate(
                        f"{r['mean_batch_size']:.1f}/fwd",
                        (r["sessions"], r["tokens_per_second"]),
                        textcoords="offset points",
                        xytext=(0, 6),
                        ha="center",
                        fontsize=8,
                    )
        for ax in (latency, throughput):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent sessions")
            ax.legend()
        latency.set_ylabel("round latency (ms)")
        latency.set_title("Round latency as devices see it")
        throughput.set_ylabel("committed tokens/s (all sessions)")
        throughput.set_title("Throughput (label: mean sequences per forward)")


if __name__ == "__main__":
    sys.exit(main())
