"""Load and faults on a verifier fleet behind HAProxy (issue #47, Build 7), on tiny models.

    python -m bench.fleet [--devices 16] [--seconds 20] [--max-new-tokens 16] --out docs/results

One fleet of 3 replicas (`deploy.fleet.Fleet`, tiny random models with the test suite's character
tokenizer, `tests.tinymodels`) serves `--devices` threads, each running generations back to back
(a fresh channel per generation, as the slow test's devices), in these phases of `--seconds` each:

- `direct`: the devices dial replica r0's own port, no proxy (r1, r2 idle): the single process;
- `proxy-1`, `proxy-2`, `proxy-3`: through HAProxy with 1, 2, 3 replicas in the pool (the others
  set to `maint` on HAProxy's runtime API, so no restart separates the phases);
- `kill`: 3 replicas, and r2 killed (-9) a third of the way in (then started again);
- `rolling`: a rolling restart of all 3 replicas; the phase lasts as long as the restart.

Each phase reports sessions served (no fallback), fallbacks by reason, time to first token
(p50/p99: from the call to the first committed token) and tokens/s (every committed token of
served sessions over the phase's wall time); `proxy_cost` is direct / proxy-1 tokens/s. Writes
fleet.json and fleet.md to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deploy.fleet import BACKEND, Fleet, ProxyLimits


@dataclass
class Outcome:
    fallback: str | None
    new_tokens: int
    ttft: float | None
    started: float


@dataclass
class Phase:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    wall: float = 0.0

    def summary(self) -> dict[str, object]:
        served = [o for o in self.outcomes if o.fallback is None]
        ttfts = sorted(o.ttft for o in served if o.ttft is not None)

        def pct(q: float) -> float | None:
            return None if not ttfts else round(ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))], 3)

        return {
            "phase": self.name,
            "wall_s": round(self.wall, 1),
            "sessions": len(self.outcomes),
            "served": len(served),
            "fallbacks": dict(Counter(o.fallback for o in self.outcomes if o.fallback is not None)),
            "ttft_p50_s": None if not ttfts else round(statistics.median(ttfts), 3),
            "ttft_p99_s": pct(0.99),
            "tokens_per_s": round(sum(o.new_tokens for o in served) / self.wall, 1) if self.wall else 0.0,
        }


def _models(root: Path) -> tuple[Path, Path]:
    # The test suite's tiny random models: the benchmark measures the fleet, not the models.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.tinymodels import char_tokenizer, save_tiny

    tok = char_tokenizer()
    return save_tiny(root, tok, seed=1, name="s"), save_tiny(root, tok, seed=2, name="g")


def _device_loop(
    port: Callable[[], int], pki: Path, name: str, specialist: object, tokens: int, stop: threading.Event,
    sink: Callable[[Outcome], None],
) -> None:  # fmt: skip
    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
    from specsteer.sdk.remote import RemoteVerifier, TlsIdentity

    assert isinstance(specialist, Specialist)
    identity = TlsIdentity.from_files(
        pki / "pins.txt", pki / "devices" / f"{name}.pem", pki / "devices" / f"{name}.key"
    )
    params = SessionParams(gamma=0.05, draft_len=3)
    while not stop.is_set():
        first: list[float] = []
        start = time.monotonic()

        def on_commit(ids: list[int], start: float = start, first: list[float] = first) -> None:
            if not first:
                first.append(time.monotonic() - start)

        try:
            verifier = RemoteVerifier(
                f"127.0.0.1:{port()}", identity, vocab_size=specialist.lm.vocab_size, connect_timeout=5.0,
                round_timeout=20.0,
            )  # fmt: skip
            with verifier:
                out = generate(specialist, f"note {name}", params, DecodeOptions(tokens), verifier, on_commit=on_commit)
            sink(Outcome(out.stats.fallback, out.stats.new_tokens, first[0] if first else None, start))
        except Exception as exc:  # a failure to count, never to hide
            sink(Outcome(f"error: {type(exc).__name__}", 0, None, start))


def _phase(
    name: str, fleet: Fleet, args: argparse.Namespace, port: Callable[[], int], specialist: object,
    during: Callable[[], None] | None = None,
) -> Phase:  # fmt: skip
    phase = Phase(name)
    lock, stop = threading.Lock(), threading.Event()

    def sink(o: Outcome) -> None:
        with lock:
            phase.outcomes.append(o)

    pki = fleet.tls_dir
    assert pki is not None
    threads = [
        threading.Thread(
            target=_device_loop,
            args=(port, pki, f"d{i:02d}", specialist, args.max_new_tokens, stop, sink),
            daemon=True,
        )
        for i in range(args.devices)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    if during is None:
        time.sleep(args.seconds)
    else:
        during()
    stop.set()
    for t in threads:
        t.join(120)
    phase.wall = time.monotonic() - start
    print(json.dumps(phase.summary()), flush=True)
    return phase


def _pool(fleet: Fleet, size: int) -> None:
    """The first `size` replicas in HAProxy's pool, the others out (maint)."""
    for i, r in enumerate(fleet.replicas):
        fleet.admin(f"set server {BACKEND}/{r.name} state {'ready' if i < size else 'maint'}")
    for r in fleet.replicas[:size]:
        fleet.wait_status(r.name, "UP")


def run(args: argparse.Namespace) -> dict[str, object]:
    from specsteer.core.models import load_causal_lm
    from specsteer.sdk.decoding import Specialist
    from specsteer.server import pki as pki_mod

    root = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    pki = pki_mod.init_pki(root / "pki")
    for i in range(args.devices):
        pki_mod.issue_device(pki.directory, f"d{i:02d}")
    s_dir, g_dir = _models(root)
    specialist = Specialist(load_causal_lm(str(s_dir)))
    serve_args = ["--generalist", str(g_dir), "--specialist", str(s_dir), "--torch-threads", "1"]
    serve_args += ["--max-sessions", str(max(8, args.devices)), "--seed", "0"]
    from deploy.fleet import free_port

    fleet = Fleet(
        root / "state", replicas=3, port=free_port(), tls_dir=pki.directory, serve_args=serve_args,
        limits=ProxyLimits(rate_per_10s=100_000, check_interval_ms=200), drain_grace=60.0,
    )  # fmt: skip
    phases: list[Phase] = []
    with fleet:
        fleet.start(timeout=600)
        _pool(fleet, 1)
        phases.append(_phase("direct", fleet, args, lambda: fleet.replicas[0].port, specialist))
        for size in (1, 2, 3):
            _pool(fleet, size)
            phases.append(_phase(f"proxy-{size}", fleet, args, lambda: fleet.port, specialist))

        def kill_one() -> None:
            time.sleep(args.seconds / 3)
            fleet.kill(fleet.replicas[2])
            time.sleep(args.seconds * 2 / 3)

        phases.append(_phase("kill", fleet, args, lambda: fleet.port, specialist, kill_one))
        fleet.start_replica(fleet.replicas[2])
        fleet.wait_replica_ready(fleet.replicas[2])
        fleet.wait_status(fleet.replicas[2].name, "UP")
        phases.append(_phase("rolling", fleet, args, lambda: fleet.port, specialist, fleet.rolling_restart))
    summaries = [p.summary() for p in phases]
    by = {s["phase"]: s for s in summaries}
    direct, proxied = by["direct"]["tokens_per_s"], by["proxy-1"]["tokens_per_s"]
    assert isinstance(direct, float) and isinstance(proxied, float)
    return {
        "command": "python -m bench.fleet " + " ".join(sys.argv[1:]),
        "devices": args.devices,
        "seconds": args.seconds,
        "max_new_tokens": args.max_new_tokens,
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        "phases": summaries,
        "proxy_cost": round(direct / proxied, 3) if proxied else None,
    }


def markdown(result: dict[str, object]) -> str:
    lines = [
        "# A verifier fleet behind HAProxy, under load and faults (tiny models)",
        "",
        f"`{result['command']}`: {result['devices']} devices, each running {result['max_new_tokens']}-token "
        f"generations back to back (a channel each), {result['seconds']} s per phase; 3 replicas of "
        f"`server serve` and HAProxy on {result['cpus']} CPU cores shared with other work (load average "
        f"at the end {result['load_average_at_end']}).",
        "",
        "| phase | wall s | sessions | served | fallbacks | TTFT p50 s | TTFT p99 s | tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    phases = result["phases"]
    assert isinstance(phases, list)
    for p in phases:
        fallbacks = ", ".join(f"{k} {v}" for k, v in p["fallbacks"].items()) or "0"
        lines.append(
            f"| {p['phase']} | {p['wall_s']} | {p['sessions']} | {p['served']} | {fallbacks} | {p['ttft_p50_s']} | "
            f"{p['ttft_p99_s']} | {p['tokens_per_s']} |"
        )
    lines += ["", f"Proxy cost (direct / proxy-1 tokens/s): {result['proxy_cost']}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (args.out / "fleet.md").write_text(markdown(result), encoding="utf-8")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
