"""Federation cost: time and peak memory per round, DP-SGD against plain SGD.

    python -m bench.federation_cost [--clients 3] [--rounds 2] [--history 40] [--dp-steps 4]
        [--personal-steps 1] [--max-len 128] [--threads 1] [--no-secagg] [--model NAME|PATH]
        [--data ../shared/data/commit-bodies-dev.jsonl] [--limit] [--out docs/results]

Three configurations of one real ``federation run --simulation`` (the run config and device list
the CLI builds, from `federation.run_options`, the real ServerApp and ClientApps joined by
`federation.simulation.run_in_process`): plain SGD on the global adapter (``--no-dp``, the
baseline), Opacus DP-SGD (the default), and DP-SGD with SecAgg+ (``--secagg``; ``--no-secagg``
drops that row). Same devices, same data, same model, same steps: the first ``--clients`` users of
the data file, each cut to their newest ``--history`` entries (the newest 4 are held out for the
devices' evaluation, as in every run).

Measured per round: its wall and CPU time; per device the time of its train message, and inside it
the global-adapter training (`train_global_dp`: DP-SGD or SGD; wall and CPU time, sequences trained
and the largest batch, since DP-SGD's Poisson batches vary in size) and the personal-adapter
training; the process's resident memory (RSS) before the round and its peak during the round; bytes
each device sent (and received) in the round, as Flower serializes them; the device's ε after the
round (DP only). DP-SGD and SecAgg+ are reported as ratios against the SGD baseline of the same run.

How memory is measured: the simulation is one process (the ServerApp and every device, which run
one after another and share one loaded model), so the process that trains is this one. Each
configuration runs in its own fresh process, forked from a server that has only imported the code,
so no configuration inherits another's heap. Inside it, the kernel's peak-RSS counter (VmHWM) is
reset before every message a device handles (``/proc/self/clear_refs``) and read after it, and a
20 Hz sampler of VmRSS covers the server's work between messages. tracemalloc would miss the
point: torch allocates tensors in C++, outside Python's allocator. Model loading (the server's v0
and the devices' shared Specialist) happens before round 1 and is reported apart as "setup".

Results go to docs/results/federation_cost.{md,json,png}; ``--limit`` is a smoke run (1 round,
1 DP and 1 personal step, 12 history entries) written as federation_cost_smoke.*.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.dataset import first_users
from bench.federation_cost_page import markdown, plot, ratios
from specsteer.federation.run_options import RunOptions

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"
# (id, label, DP, SecAgg+); the first is the baseline every ratio divides by.
CASES: tuple[tuple[str, str, bool, bool], ...] = (
    ("sgd", "no DP (SGD)", False, False),
    ("dp", "DP-SGD", True, False),
    ("dp-secagg", "DP-SGD + SecAgg+", True, True),
)
# What the fork server imports once, so each configuration's process starts in a second.
PRELOAD = [
    "torch",
    "opacus",
    "peft",
    "transformers",
    "specsteer.federation.run_options",
    "specsteer.federation.client_app",
    "specsteer.federation.server_app",
    "specsteer.federation.secagg",
    "specsteer.federation.simulation",
]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.federation_cost", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="dataset JSONL, one user a line")
    p.add_argument("--clients", type=int, default=3, help="simulated devices (the first N users of --data)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--history", type=int, default=40, help="newest history entries kept per user")
    p.add_argument("--dp-steps", type=int, default=4, help="global-adapter steps per round (DP-SGD or SGD)")
    p.add_argument("--personal-steps", type=int, default=1, help="personal-adapter steps per round")
    p.add_argument("--max-len", type=int, default=128, help="tokens per training sequence")
    p.add_argument("--model", default=None, help="the Specialist (default: the embedded SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the simulation process")
    p.add_argument("--no-secagg", action="store_true", help="skip the DP-SGD + SecAgg+ row")
    p.add_argument("--limit", action="store_true", help="smoke run: 1 round, 1+1 steps, 12 history entries")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    args = p.parse_args(argv)
    if args.limit:
        args.rounds, args.dp_steps, args.personal_steps = 1, 1, 1
        args.history = min(args.history, 12)
    if not args.data.is_file():
        print(f"bench.federation_cost: error: no data file at {args.data}", file=sys.stderr)
        return 1
    if args.clients < 2 or args.rounds < 1 or args.history < 6 or args.threads < 1:
        print("bench.federation_cost: error: need --clients >= 2, --rounds >= 1, --history >= 6", file=sys.stderr)
        return 1
    cases = [c for c in CASES if not (args.no_secagg and c[3])]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-fedcost-") as tmp:
        work = Path(tmp)
        users = _write_subset(args.data, work / "data.jsonl", args.clients, args.history)
        if len(users) < args.clients:
            print(f"bench.federation_cost: error: {args.data} holds only {len(users)} users", file=sys.stderr)
            return 1
        results = []
        try:
            for case_id, label, dp, secagg in cases:
                options = _run_options(args, work / "data.jsonl", work / case_id, dp=dp, secagg=secagg)
                spec = {
                    "id": case_id,
                    "label": label,
                    "options": options,
                    "argv": _run_argv(options),
                    "threads": args.threads,
                    "result": str(work / f"{case_id}.json"),
                }
                print(f"== {label}: federation {' '.join(spec['argv'])}", flush=True)
                if not _run_isolated(spec):
                    print(f"bench.federation_cost: error: the {label} run failed (see above)", file=sys.stderr)
                    return 1
                results.append(json.loads(Path(spec["result"]).read_text(encoding="utf-8")))
        finally:
            _stop_fork_server()
    problems = [
        f"{r['label']} round {rnd['round']}: {rnd['replies']} of {args.clients} devices trained {rnd['refusals']}"
        for r in results
        for rnd in r["rounds"]
        if rnd["replies"] != args.clients
    ]
    if problems:
        print("bench.federation_cost: error: not every device trained: " + "; ".join(problems), file=sys.stderr)
        return 1
    result = {
        "command": " ".join(["python -m bench.federation_cost", *(argv if argv is not None else sys.argv[1:])]),
        "settings": {
            "model": results[0]["run_config"].get("model", "smollm2-135m-instruct"),
            "data": str(args.data),
            "users": users,
            "clients": args.clients,
            "rounds": args.rounds,
            "history_entries": args.history,
            "dp_steps": args.dp_steps,
            "personal_steps": args.personal_steps,
            "max_len": args.max_len,
            "threads": args.threads,
        },
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPU",
        "units": "memory (*_mb) in MiB of resident set size (/proc VmRSS, VmHWM); traffic in bytes",
        "seconds": time.perf_counter() - started,
        "baseline": results[0]["id"],
        "ratios": ratios(results),
        "cases": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "federation_cost" + ("_smoke" if args.limit else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
    plot(result, args.out / f"{stem}.png")
    print(markdown(result))
    print(f"wrote {args.out}/{stem}.md, {stem}.json, {stem}.png")
    return 0


def _write_subset(source: Path, target: Path, clients: int, history: int) -> list[str]:
    """The first `clients` users of `source`, each with their newest `history` entries, no queries."""
    users = first_users(source, clients)
    lines = [json.dumps({"user_id": u["user_id"], "profile": u["profile"][-history:]}) + "\n" for u in users]
    target.write_text("".join(lines), encoding="utf-8")
    return [str(u["user_id"]) for u in users]


def _run_options(args: argparse.Namespace, data: Path, state: Path, *, dp: bool, secagg: bool) -> RunOptions:
    """One configuration's `federation run --simulation`."""
    return RunOptions(
        state_dir=state,
        rounds=args.rounds,
        clients=args.clients,
        data=data,
        model=args.model or None,
        dp=dp,
        secagg=secagg,
        dp_steps=args.dp_steps,
        personal_steps=args.personal_steps,
        max_len=args.max_len,
    )


def _run_argv(options: RunOptions) -> list[str]:
    """The `federation run` command line that asks for `options` (printed, and kept in the results)."""
    argv = ["run", "--simulation", "--rounds", str(options.rounds), "--clients", str(options.clients)]
    argv += ["--data", str(options.data), "--state-dir", str(options.state_dir), "--dp-steps", str(options.dp_steps)]
    argv += ["--personal-steps", str(options.personal_steps), "--max-len", str(options.max_len)]
    if options.model:
        argv += ["--model", str(options.model)]
    return [*argv, *(["--no-dp"] if not options.dp else []), *(["--secagg"] if options.secagg else [])]


def _run_isolated(spec: dict[str, Any]) -> bool:
    """Run one configuration in a fresh process forked from an import-only server; True if it worked."""
    from bench import federation_cost as this  # by module name, also when this file runs as __main__

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    process = ctx.Process(target=this.measure_case, args=(spec,), name=f"fedcost-{spec['id']}")
    process.start()
    process.join()
    return process.exitcode == 0 and Path(spec["result"]).is_file()


def _stop_fork_server() -> None:
    """Stop the fork server (it holds the preloaded libraries) instead of leaving it until exit."""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


# --- inside one configuration's process ---------------------------------------------------------


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux ``clear_refs`` 5); False if not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class _Sampler(threading.Thread):
    """VmRSS every `period` seconds, with timestamps, until stopped."""

    def __init__(self, period: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.samples: list[tuple[float, float]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((time.perf_counter(), _status_mb("VmRSS")))
            self._stop_event.wait(self.period)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def peak(self, start: float, end: float) -> float:
        return max((mb for t, mb in self.samples if start <= t <= end), default=0.0)


@dataclass
class _Call:
    """One message a device handled: what, when, how long, and the process's peak RSS meanwhile."""

    node_id: int
    kind: str
    message_id: str
    round: int
    start: float
    end: float = 0.0
    cpu_end: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    rss_before_mb: float = 0.0
    peak_mb: float | None = None
    global_seconds: float = 0.0
    global_cpu_seconds: float = 0.0
    global_sequences: int = 0  # rows the global-adapter training ran (each step padded to task.step_rows)
    global_max_batch: int = 0
    personal_seconds: float = 0.0
    uplink_bytes: int = 0
    downlink_bytes: int = 0


class _Recorder:
    """Wraps the ClientApp: times every message and tracks rounds (a train after an evaluate starts one)."""

    def __init__(self, app: Any, can_reset: bool) -> None:
        self.app = app
        self.can_reset = can_reset
        self.calls: list[_Call] = []
        self.current: _Call | None = None
        self._round = 0
        self._last_kind = ""

    def __call__(self, message: Any, context: Any) -> Any:
        kind = str(message.metadata.message_type)
        if kind == "train" and self._last_kind != "train":
            self._round += 1
        self._last_kind = kind
        call = _Call(
            node_id=int(message.metadata.dst_node_id),
            kind=kind,
            message_id=str(message.metadata.message_id),
            round=self._round,
            start=time.perf_counter(),
            rss_before_mb=_status_mb("VmRSS"),
        )
        self.current = call
        self.can_reset = self.can_reset and _reset_peak()
        cpu = time.process_time()
        try:
            return self.app(message, context)
        finally:
            call.end = time.perf_counter()
            call.cpu_end = time.process_time()
            call.seconds, call.cpu_seconds = call.end - call.start, call.cpu_end - cpu
            call.peak_mb = _status_mb("VmHWM") if self.can_reset else None
            self.current = None
            self.calls.append(call)
            peak = "" if call.peak_mb is None else f", peak RSS {call.peak_mb:.0f} MiB"
            print(f"   round {call.round} node {call.node_id} {kind}: {call.seconds:.1f} s{peak}", flush=True)


@contextmanager
def _timed_training(recorder: _Recorder) -> Iterator[None]:
    """Time the global (DP-SGD or SGD) and personal training inside each train message.

    `federation.participant` calls them, and `train_global_dp` calls `per_sequence_loss`, by these
    module-level names; the wrappers only add timers and count the sequences of each global batch.
    """
    import specsteer.federation.participant as device
    import specsteer.federation.task as task

    originals = {"train_global_dp": device.train_global_dp, "train_personal": device.train_personal}
    loss = task.per_sequence_loss
    in_global = [False]

    def global_dp(*a: Any, **k: Any) -> Any:
        t, c = time.perf_counter(), time.process_time()
        in_global[0] = True
        try:
            return originals["train_global_dp"](*a, **k)
        finally:
            in_global[0] = False
            if recorder.current is not None:
                recorder.current.global_seconds += time.perf_counter() - t
                recorder.current.global_cpu_seconds += time.process_time() - c

    def counted_loss(model: Any, ids: Any, *a: Any, **k: Any) -> Any:
        if in_global[0] and recorder.current is not None:
            recorder.current.global_sequences += int(ids.shape[0])
            recorder.current.global_max_batch = max(recorder.current.global_max_batch, int(ids.shape[0]))
        return loss(model, ids, *a, **k)

    def personal(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return originals["train_personal"](*a, **k)
        finally:
            if recorder.current is not None:
                recorder.current.personal_seconds += time.perf_counter() - t

    device.train_global_dp, device.train_personal = global_dp, personal  # type: ignore[assignment]
    task.per_sequence_loss = counted_loss  # type: ignore[assignment]
    try:
        yield
    finally:
        device.train_global_dp, device.train_personal = originals["train_global_dp"], originals["train_personal"]
        task.per_sequence_loss = loss


def measure_case(spec: dict[str, Any]) -> None:
    """One configuration, start to finish, in this (fresh) process; writes its result to spec['result']."""
    import torch

    from specsteer.federation.client_app import app as client_app
    from specsteer.federation.offline import quiet_flower
    from specsteer.federation.server_app import ServerSettings, ensure_initial_version
    from specsteer.federation.simulation import deflated_bytes, run_in_process
    from specsteer.federation.task import TaskConfig, specialist_for

    torch.set_num_threads(int(spec["threads"]))
    quiet_flower(False)
    options: RunOptions = spec["options"]
    config = options.run_config()
    nodes = options.simulation_nodes()
    for node in nodes:
        node["threads"] = int(spec["threads"])
    load_before = os.getloadavg()

    # Setup, outside the rounds: the server's v0 (it loads the model once) and the devices' shared model.
    t0 = time.perf_counter()
    cfg = TaskConfig.from_run_config(config)
    ensure_initial_version(ServerSettings.from_run_config(config), cfg)
    specialist_for(cfg)
    setup = {
        "seconds": time.perf_counter() - t0,
        "peak_rss_mb": _status_mb("VmHWM"),
        "rss_after_mb": _status_mb("VmRSS"),
    }
    recorder = _Recorder(client_app, can_reset=_reset_peak())
    sampler = _Sampler()
    sampler.start()
    run_start, run_cpu = time.perf_counter(), time.process_time()
    try:
        with _timed_training(recorder):
            summary, grid = run_in_process(config, nodes, client_app=recorder)  # type: ignore[arg-type]
    finally:
        sampler.stop()
    run_seconds = time.perf_counter() - run_start

    by_id = {c.message_id: c for c in recorder.calls}
    for delivery in grid.deliveries:
        call = by_id.get(str(delivery.message.metadata.message_id))
        if call is not None:
            call.uplink_bytes += sum(len(b) for b in delivery.sent_bytes)
            call.downlink_bytes += sum(len(b) for b in deflated_bytes(delivery.message))
    users = {1000 + i: str(node.get("user-id") or f"part{i}") for i, node in enumerate(nodes)}
    logs = {1000 + i: _device_log(Path(node["state-dir"]), summary.get("run_id")) for i, node in enumerate(nodes)}
    rounds = _rounds(recorder.calls, sampler, summary, users, logs, run_start, run_cpu, setup["rss_after_mb"])
    result = {
        "id": spec["id"],
        "label": spec["label"],
        "argv": spec["argv"],
        "run_config": config,
        "dp": bool(config.get("dp", True)),
        "secagg": bool(config.get("secagg", False)),
        "setup": setup,
        "run_seconds": run_seconds,
        "peak_reset_supported": recorder.can_reset,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "rounds": rounds,
        "calls": [asdict(c) for c in recorder.calls],
    }
    Path(spec["result"]).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def _device_log(state_dir: Path, run_id: Any) -> dict[int, dict[str, Any]]:
    """A device's own train records of this run (rounds.jsonl), by server round."""
    path = state_dir / "rounds.jsonl"
    out: dict[int, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("event") == "train" and record.get("run_id") == run_id:
                out[int(record["server_round"])] = record
    return out


def _rounds(
    calls: list[_Call],
    sampler: _Sampler,
    summary: dict[str, Any],
    users: dict[int, str],
    logs: dict[int, dict[int, dict[str, Any]]],
    run_start: float,
    run_cpu: float,
    loaded_mb: float,
) -> list[dict[str, Any]]:
    server_rounds = {int(r["server_round"]): r for r in summary.get("rounds", [])}
    out = []
    prev_end, prev_cpu = run_start, run_cpu
    for number in sorted({c.round for c in calls}):
        mine = [c for c in calls if c.round == number]
        end = max(c.end for c in mine)
        cpu_end = max(c.cpu_end for c in mine)
        peaks = [c.peak_mb for c in mine if c.peak_mb is not None]
        peak = max([*peaks, sampler.peak(prev_end, end)])
        before = mine[0].rss_before_mb
        clients = []
        for node, user in users.items():
            train = [c for c in mine if c.node_id == node and c.kind == "train"]
            evaluate = [c for c in mine if c.node_id == node and c.kind == "evaluate"]
            log = logs[node].get(number, {})
            clients.append(
                {
                    "user": user,
                    "train_seconds": sum(c.seconds for c in train),
                    "train_cpu_seconds": sum(c.cpu_seconds for c in train),
                    "global_seconds": sum(c.global_seconds for c in train),
                    "global_cpu_seconds": sum(c.global_cpu_seconds for c in train),
                    "global_sequences": sum(c.global_sequences for c in train),
                    "global_max_batch": max((c.global_max_batch for c in train), default=0),
                    "personal_seconds": sum(c.personal_seconds for c in train),
                    "evaluate_seconds": sum(c.seconds for c in evaluate),
                    "train_peak_rss_mb": max((c.peak_mb for c in train if c.peak_mb is not None), default=None),
                    "uplink_bytes": sum(c.uplink_bytes for c in train + evaluate),
                    "downlink_bytes": sum(c.downlink_bytes for c in train + evaluate),
                    "train_messages": len(train),
                    "examples": log.get("examples"),
                    "epsilon": log.get("epsilon"),  # None without DP (the device logs +inf as null)
                }
            )
        record = server_rounds.get(number, {})
        eps = [c["epsilon"] for c in clients if c["epsilon"] is not None]
        out.append(
            {
                "round": number,
                "wall_seconds": end - prev_end,
                "cpu_seconds": cpu_end - prev_cpu,
                "rss_before_mb": before,
                "peak_rss_mb": peak,
                "peak_above_before_mb": peak - before,
                "peak_above_loaded_mb": peak - loaded_mb,
                "client_train_seconds_mean": _mean([c["train_seconds"] for c in clients]),
                "global_seconds_mean": _mean([c["global_seconds"] for c in clients]),
                "global_cpu_seconds_mean": _mean([c["global_cpu_seconds"] for c in clients]),
                "personal_seconds_mean": _mean([c["personal_seconds"] for c in clients]),
                "global_sequences": sum(c["global_sequences"] for c in clients),
                "global_max_batch": max(c["global_max_batch"] for c in clients),
                "uplink_bytes_mean": _mean([c["uplink_bytes"] for c in clients]),
                "downlink_bytes_mean": _mean([c["downlink_bytes"] for c in clients]),
                "epsilon_mean": _mean(eps) if eps else None,
                "replies": int(record.get("replies", 0)),
                "refusals": record.get("refusals", []),
                "version_out": record.get("version_out"),
                "clients": clients,
            }
        )
        prev_end, prev_cpu = end, cpu_end
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


if __name__ == "__main__":
    sys.exit(main())
