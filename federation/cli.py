"""`federation`: federated LoRA tuning of per-device Specialists.

    federation run --simulation --rounds N --clients M [--data FILE] [--model NAME|PATH] [--state-dir D] [--secagg]
                   [--no-dp] [--epsilon E]
    federation run --superlink HOST:PORT --root-certificates CA.pem [--rounds N] [--state-dir D]
    federation schedule --every DURATION (--simulation ... | --superlink ...) [--max-runs N]
                        [--run-timeout DURATION] [--retries N] [--retry-backoff DURATION]
    federation status [--state-dir D] [--device DIR ...]
    federation device-state --state-dir DIR --idle yes|no --charging yes|no --unmetered yes|no
    federation deploy DIR --devices NAME[,NAME...] [--host H] [--port P] [--no-node-auth]
    federation register-nodes --superlink HOST:PORT --root-certificates CA.pem --allow-list FILE

Every failure a user can cause prints one sentence and exits non-zero (2 for bad usage). `run`
prints what each round's devices did (trained, sat out and why, refused and why); a run in which
no device trained exits 1 (`RunFailed`). A simulation also says so on stderr as each round ends
(with the devices' mean ε), as does the rest of the progress; `--quiet` keeps stderr to warnings
and errors. stdout holds only the result: the run summary, or the status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from specsteer.core.cli import Parser as _Parser
from specsteer.core.cli import bad_value, command_parser, number, reported, whole_number
from specsteer.core.errors import ConfigError, SpecSteerError
from specsteer.core.logs import configure_cli_logging
from specsteer.federation.attempts import TOKEN_KEY, Attempt
from specsteer.federation.errors import RunFailed
from specsteer.federation.run_options import RunOptions

__all__ = ["main", "parse_duration"]

DEFAULT_STATE = Path.home() / ".specsteer" / "federation"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_DEFAULT_DEADLINE = 3600.0  # a short period (tests, demos) must not cut a normal run short
logger = logging.getLogger("specsteer.federation.cli")


def parse_duration(text: str) -> float:
    """Seconds in "90", "30s", "15m", "6h", "1d" or combinations such as "1h30m"."""
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        seconds = float(raw)
    else:
        parts = _DURATION.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise bad_value(f"not a duration: {text!r} (use e.g. 30s, 15m, 6h, 1d, 1h30m)")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or not math.isfinite(seconds):
        raise bad_value(f"the duration must be positive: {text!r}")
    return seconds


_positive_int = whole_number(1)
_count = whole_number(0)
_positive_float = number(positive=True)


def _address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise bad_value(f"not a HOST:PORT address: {text!r}")
    return text


def _add_run_options(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--simulation", action="store_true", help="run every device in this process")
    mode.add_argument("--superlink", type=_address, metavar="HOST:PORT", help="submit to a running flower-superlink")
    p.add_argument("--rounds", type=_positive_int, default=1, help="rounds in the run (default 1)")
    p.add_argument("--clients", type=_positive_int, default=2, help="simulated devices (--simulation; default 2)")
    p.add_argument("--min-clients", type=_positive_int, help="devices needed per round (default: all simulated, 2)")
    p.add_argument("--data", type=Path, help="dataset JSONL (one user a line) or one user's profile (--simulation)")
    p.add_argument("--model", default=None, help="the Specialist: folder, .gguf or embedded name")
    p.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE, help=f"server and device state (default {DEFAULT_STATE})"
    )
    p.add_argument("--no-dp", action="store_true", help="train the global adapter without DP (no ε spent)")
    p.add_argument("--secagg", action="store_true", help="SecAgg+: the server sees only the devices' average")
    p.add_argument("--epsilon", type=_positive_float, help="each simulated device's total ε budget (default 8)")
    p.add_argument("--noise-multiplier", type=_positive_float, help="DP-SGD noise multiplier (default 1.0)")
    p.add_argument(
        "--dp-steps",
        type=_count,
        help="DP-SGD steps proposed per round; each device takes what its ε budget affords, up to it (default 4)",
    )
    p.add_argument("--personal-steps", type=_count, help="personal adapter steps per round (default 8)")
    p.add_argument("--max-len", type=_positive_int, help="tokens per training sequence (default 256)")
    p.add_argument("--round-timeout", type=_positive_float, help="seconds to wait for device replies (default 3600)")
    p.add_argument("--root-certificates", type=Path, help="CA certificate of the SuperLink's TLS (--superlink)")
    p.add_argument("--insecure", action="store_true", help="talk to the SuperLink without TLS (testing only)")
    p.add_argument("--verbose", action="store_true", help="show Flower's own log and SpecSteer's debug lines")
    _add_quiet(p)
    p.add_argument("--json", action="store_true", help="print the run summary as one JSON object")


def _add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quiet", action="store_true", help="no progress on stderr (rounds as they end, ...): warnings and errors only"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("federation", "federated LoRA tuning of per-device Specialists")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run federated rounds once")
    _add_run_options(run)
    schedule = sub.add_parser("schedule", help="start a run every DURATION, for as long as it is left running")
    schedule.add_argument("--every", type=parse_duration, required=True, metavar="DURATION", help="e.g. 6h, 30m, 1d")
    schedule.add_argument("--max-runs", type=_positive_int, help="stop after this many periods (default: never)")
    schedule.add_argument(
        "--run-timeout",
        type=parse_duration,
        metavar="DURATION",
        help="deadline of one attempt (default: the period, at least 1h)",
    )
    schedule.add_argument(
        "--retries", type=_count, default=3, help="retries of a failed run within its period (default 3)"
    )
    schedule.add_argument(
        "--retry-backoff",
        type=parse_duration,
        default=60.0,
        metavar="DURATION",
        help="wait before the first retry, doubled for each further one (default 60s)",
    )
    _add_run_options(schedule)
    status = sub.add_parser("status", help="show adapter versions, recent runs and device ledgers")
    status.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE, help=f"the federation's state (default {DEFAULT_STATE})"
    )
    status.add_argument("--device", type=Path, action="append", default=[], help="a device state folder (repeatable)")
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    _add_quiet(status)
    state = sub.add_parser(
        "device-state",
        help="report the device's idle, charging and network state for its eligibility (federation.eligibility)",
    )
    state.add_argument(
        "--state-dir", type=Path, required=True, help="the device's state folder (node config state-dir)"
    )
    for flag, what in (("idle", "idle"), ("charging", "charging"), ("unmetered", "on an unmetered network")):
        state.add_argument(f"--{flag}", type=_yes_no, required=True, metavar="yes|no", help=f"whether it is {what}")
    state.add_argument("--json", action="store_true", help="print the state written as one JSON object")
    _add_quiet(state)
    deploy = sub.add_parser(
        "deploy",
        help="provision a SuperLink deployment: TLS, each device's node key and endorsement, the allow-list",
    )
    deploy.add_argument("folder", type=Path, help="where the deployment's files go (kept and added to on a re-run)")
    deploy.add_argument("--devices", required=True, help="device names, comma-separated (e.g. phone-1,phone-2)")
    deploy.add_argument("--host", default="127.0.0.1", help="the SuperLink's host (default 127.0.0.1)")
    deploy.add_argument("--port", type=_positive_int, default=9092, help="the SuperLink's port (default 9092)")
    deploy.add_argument(
        "--no-node-auth",
        action="store_true",
        help="print a SuperLink command that accepts any SuperNode (Flower's node authentication off)",
    )
    deploy.add_argument("--json", action="store_true", help="print the files and commands as one JSON object")
    _add_quiet(deploy)
    register = sub.add_parser(
        "register-nodes", help="enter the allow-list's public keys into a running SuperLink (flwr supernode register)"
    )
    register.add_argument(
        "--superlink",
        required=True,
        metavar="HOST:PORT",
        help="the SuperLink's address, as for `federation run --superlink`",
    )
    register.add_argument("--root-certificates", type=Path, help="CA certificate of the SuperLink's TLS")
    register.add_argument("--insecure", action="store_true", help="talk to the SuperLink without TLS (testing only)")
    register.add_argument("--allow-list", type=Path, required=True, help="allow-list.txt of `federation deploy`")
    register.add_argument("--json", action="store_true", help="print the node ids as one JSON object")
    _add_quiet(register)
    return parser


def deploy(args: argparse.Namespace) -> dict[str, Any]:
    """`federation deploy`: `federation.deploy.provision_deployment`, and the commands that use it."""
    from specsteer.federation.deploy import provision_deployment, superlink_command, supernode_command

    names = [n.strip() for n in str(args.devices).split(",") if n.strip()]
    made = provision_deployment(args.folder, names)
    superlink = f"{args.host}:{args.port}"
    database = Path(args.folder) / "link.db"
    return {
        "certificates": {k: str(v) for k, v in made.certificates.__dict__.items()},
        "allow_list": str(made.allow_list),
        "enrollment_key": str(Path(args.folder) / "enrollment" / "enrollment.key"),
        "devices": {name: str(path) for name, path in made.devices.items()},
        "superlink": superlink_command(
            made.certificates, database, host=args.host, port=args.port, node_auth=not args.no_node_auth
        ),
        "register": [
            *("federation", "register-nodes", "--superlink", superlink),
            *("--root-certificates", str(made.certificates.ca), "--allow-list", str(made.allow_list)),
        ],
        "supernodes": {
            name: supernode_command(
                path,
                superlink,
                port=9094 + i,
                node_config=f'data-file="DATA" state-dir={json.dumps(str(path / "state"))}',
            )
            for i, (name, path) in enumerate(made.devices.items())
        },
    }


def _print_deploy(result: dict[str, Any]) -> None:
    import shlex

    tls = Path(result["certificates"]["ca"]).parent
    print(f"Wrote the deployment: TLS in {tls}, allow-list {result['allow_list']}.")
    print(f"Keep {result['enrollment_key']} off the SuperLink's machine: it endorses devices.")
    print("1. Start the SuperLink:\n   " + shlex.join(result["superlink"]))
    print("2. Register the devices' node keys with it:\n   " + shlex.join(result["register"]))
    print("3. On each device (its folder holds its keys; set DATA to its history):")
    for name, command in result["supernodes"].items():
        print(f"   {name}: " + shlex.join(command))


def _yes_no(text: str) -> bool:
    value = text.strip().lower()
    if value in ("yes", "true", "1", "on"):
        return True
    if value in ("no", "false", "0", "off"):
        return False
    raise bad_value(f"expected yes or no, not {text!r}")


def device_state(args: argparse.Namespace) -> dict[str, Any]:
    """`federation device-state`: what the embedding app's `report_state` writes, for the reference device."""
    from specsteer.federation.eligibility import STATE_FILE, report_state

    state = report_state(idle=args.idle, charging=args.charging, unmetered=args.unmetered, state_dir=args.state_dir)
    return {"path": str(Path(args.state_dir).expanduser() / STATE_FILE), **state.as_dict()}


# --- run ----------------------------------------------------------------------------------------


def run_options(args: argparse.Namespace) -> RunOptions:
    """What `run` / `schedule` options ask for (`federation.run_options` turns it into configs).

    Every option is named as its `RunOptions` field, except `--no-dp` (`dp`)."""
    named = {f.name: getattr(args, f.name) for f in fields(RunOptions) if f.name != "dp"}
    return RunOptions(**named, dp=not args.no_dp)


def run_once(
    args: argparse.Namespace, *, timeout: float | None = None, attempt: Attempt | None = None
) -> dict[str, Any]:
    """One run; with `timeout`, a SuperLink submission is killed when it passes.

    With `attempt` (the scheduler's), the run publishes only while the attempt holds its lease,
    and an in-process simulation stops at its next message once the attempt is revoked.
    """
    options = run_options(args)
    config = options.run_config()
    if attempt is not None:
        config[TOKEN_KEY] = attempt.token
    if args.simulation:
        if args.superlink or args.root_certificates or args.insecure:
            raise ConfigError("--root-certificates and --insecure only apply with --superlink.")
        from specsteer.federation.simulation import run_in_process

        nodes = options.simulation_nodes(lambda message: _log(args, message))
        _log(args, f"simulating {len(nodes)} devices for {args.rounds} round(s); state in {args.state_dir}")
        with _round_lines(nodes):
            summary, _ = run_in_process(config, nodes, cancelled=None if attempt is None else attempt.cancelled)
        _add_device_outcomes(summary, nodes)
        return summary
    if args.data is not None or args.epsilon is not None:
        raise ConfigError(
            "--data and --epsilon are device settings: give them to each flower-supernode's --node-config."
        )
    from specsteer.federation.deploy import submit_run

    return submit_run(
        args.superlink,
        config,
        root_certificates=args.root_certificates,
        insecure=args.insecure,
        stream=args.verbose,
        timeout=timeout,
    )


def _add_device_outcomes(summary: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """Add to each round what the simulated devices' own logs say they did with it.

    The server counts replies, and a device that took no step learning from its data (no budget
    left, no usable sequence) replies like one that trained: that is what keeps its history's
    size from the server. A simulation's operator owns its devices, so their logs can say which.
    """
    from specsteer.federation.participant import TRAINED, Device, round_outcome

    seen: dict[int, Counter[str]] = {}
    figures: dict[int, dict[str, list[float]]] = {}
    for node in nodes:
        try:
            records = Device.from_node_config(node).read_log()
        except Exception:  # a log that cannot be read says nothing; the device is not counted as trained
            records = []
        for record in records:
            what = round_outcome(record)
            if what is not None and record.get("run_id") == summary.get("run_id"):
                server_round = int(record.get("server_round", 0))
                seen.setdefault(server_round, Counter())[what] += 1
                for key, name in (("epsilon", "epsilon"), ("personal_loss", "loss")):
                    value = record.get(key)
                    if isinstance(value, int | float) and math.isfinite(value):
                        figures.setdefault(server_round, {}).setdefault(name, []).append(float(value))
    for r in summary.get("rounds", []):
        outcomes = seen.get(r["server_round"], Counter())
        r["devices"] = {"of": len(nodes), "trained": outcomes.pop(TRAINED, 0), "sat_out": dict(outcomes)}
        # The devices' own figures, which they never send the server: the mean ε each has spent so
        # far (DP only) and the mean loss of their personal adapters' training this round.
        for name in ("epsilon", "loss"):
            values = figures.get(r["server_round"], {}).get(name)
            r["devices"][name] = sum(values) / len(values) if values else None


class _RoundLine(logging.Filter):
    """Rewrites the server's "round ended" record (`federation.rounds`) into the line `run` prints
    for that round at the end, with what the simulated devices' logs say they did."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__()
        self.nodes = nodes

    def filter(self, record: logging.LogRecord) -> bool:
        ended = getattr(record, "round_record", None)
        if ended is None:
            return True
        summary: dict[str, Any] = {"run_id": getattr(record, "run_id", None), "rounds": [dict(ended.__dict__)]}
        _add_device_outcomes(summary, self.nodes)
        (r,) = summary["rounds"]
        total = getattr(record, "rounds", None)
        name = f"round {r['server_round']}" + (f" of {total}" if total is not None else "")
        devices = r["devices"]
        figures = [f"{label} {devices[key]:.3f}" for key, label in _FIGURES if devices.get(key) is not None]
        record.msg, record.args = "%s: %s", (name, ", ".join([_round_result(r), *figures]))
        return True


_FIGURES = (("loss", "mean personal loss"), ("epsilon", "mean ε spent per device"))


@contextlib.contextmanager
def _round_lines(nodes: list[dict[str, Any]]) -> Iterator[None]:
    """While a simulation runs, each round's end is told in `run`'s words (`_RoundLine`)."""
    from specsteer.federation.rounds import log as rounds_log

    line = _RoundLine(nodes)
    rounds_log.addFilter(line)
    try:
        yield
    finally:
        rounds_log.removeFilter(line)


def _trained(r: dict[str, Any]) -> int:
    """Devices that trained in a round: from their logs in a simulation, else the updates the server got."""
    devices = r.get("devices")
    return int(devices["trained"]) if devices is not None else int(r.get("replies", 0))


def _tally(counts: dict[str, int]) -> str:
    return "; ".join(reason.rstrip(".") + (f" ×{n}" if n > 1 else "") for reason, n in counts.items())


def _round_parts(r: dict[str, Any]) -> list[str]:
    """What happened to a round's devices: trained (or sent an update), sat out and why, refused and why."""
    devices = r.get("devices")
    if devices is None:  # a SuperLink's devices: the server cannot tell an update of noise alone from training
        parts = [f"{r.get('replies', 0)} device(s) sent an update"]
    else:
        parts = [f"{devices['trained']} of {devices['of']} device(s) trained"]
        if devices["sat_out"]:
            parts.append(f"{sum(devices['sat_out'].values())} sat out ({_tally(devices['sat_out'])})")
    refusals = r.get("refusals") or []
    if refusals:
        parts.append(f"{len(refusals)} refused or failed ({_tally(Counter(refusals))})")
    return parts


def _print_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(summary))
        return
    print(f"run {summary.get('run_id')}: global adapter v{summary.get('version_in')} -> v{summary.get('version_out')}")
    for r in summary.get("rounds", []):
        print(f"  round {r['server_round']}: {_round_result(r)}")


def _round_result(r: dict[str, Any]) -> str:
    """What a round did: its devices, the version it made, and the devices' mean ε."""
    eps = r.get("train_metrics", {}).get("epsilon")
    made = "no new version"
    if r.get("version_out") is not None:
        made = f"v{r['version_out']}" + ("" if _trained(r) else ", which learnt from no device's data")
    line = f"{', '.join(_round_parts(r))}, {made}"
    if eps is not None:
        line += f", mean device ε {eps:.3f}"
    return line


def _none_trained(rounds: list[dict[str, Any]]) -> str:
    """The one sentence of a run in which no device trained: what its devices did instead."""
    sat: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for r in rounds:
        sat.update((r.get("devices") or {}).get("sat_out") or {})
        refused.update(r.get("refusals") or [])
    what = []
    if sat:
        what.append(f"{sum(sat.values())} sat out: {_tally(dict(sat))}")
    if refused:
        what.append(f"{sum(refused.values())} refused or failed: {_tally(dict(refused))}")
    why = f" ({'; '.join(what)})" if what else ""
    made = [r["version_out"] for r in rounds if r.get("version_out") is not None]
    result = f"v{made[-1]} learnt from no device's data" if made else "no new global adapter was made"
    return f"no device trained in any of the run's {len(rounds)} round(s){why}, so {result}."


# --- schedule -------------------------------------------------------------------------------------


def schedule(args: argparse.Namespace) -> int:
    """Start a run every `--every` seconds; a failed run is logged with its cause and the schedule goes on.

    Each attempt has a deadline (`--run-timeout`, default the period but at least an hour) and a
    lease on publishing (`federation.attempts`). When the deadline passes the lease is revoked,
    so nothing the attempt finishes later is published; a submission to a SuperLink is killed,
    and an in-process simulation (which cannot be killed) stops at its next message. A failed
    attempt is retried after `--retry-backoff`, doubling each time, as long as the retry would
    still start within the period; a retry is a new run with a new lease, and after an
    in-process simulation it starts only once the cancelled one has stopped (they would share
    this process's model and the devices' ledger locks). The time of the last start is kept in
    the state folder, so a restarted scheduler waits out the rest of the period instead of
    running at once.
    """
    state = args.state_dir.expanduser() / "schedule.json"
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
    deadline = float(args.run_timeout or max(args.every, MIN_DEFAULT_DEADLINE))
    cancelled: list[threading.Thread] = []  # in-process runs revoked at their deadline, maybe still finishing
    periods = 0
    while not stop.is_set():
        last = _read_last_start(state)
        wait = 0.0 if last is None else last + args.every - time.time()
        if wait > 0:
            _log(args, f"next run in {wait:.0f} s")
            if stop.wait(wait):
                break
        started = time.time()
        _write_last_start(state, started)
        _run_period(args, started, deadline, stop, cancelled)
        periods += 1
        if args.max_runs is not None and periods >= args.max_runs:
            break
    return 0


def _run_period(
    args: argparse.Namespace, started: float, deadline: float, stop: threading.Event, cancelled: list[threading.Thread]
) -> bool:
    """One scheduled run and its retries within the period; True if an attempt succeeded."""
    backoff = float(args.retry_backoff)
    for attempt in range(int(args.retries) + 1):
        if attempt:
            if time.time() + backoff >= started + args.every:
                _log(args, "no time left in this period for another retry; waiting for the next period")
                return False
            _log(args, f"retrying in {backoff:g} s (retry {attempt} of {args.retries})")
            if stop.wait(backoff):
                return False
            backoff *= 2
        if not _wait_for_cancelled(args, cancelled, started + args.every, stop):
            return False
        try:
            summary = _attempt(args, deadline, cancelled)
        except Exception as exc:  # any failure of one run is logged; the schedule must keep going
            print(f"federation: run failed: {_cause(exc)}", file=sys.stderr, flush=True)
            continue
        _print_summary(args, summary)
        return True
    return False


def _wait_for_cancelled(
    args: argparse.Namespace, cancelled: list[threading.Thread], until: float, stop: threading.Event
) -> bool:
    """Wait (at most until `until`) for cancelled in-process runs to stop; False if one still runs."""
    told = False
    while cancelled:
        if not cancelled[0].is_alive():
            cancelled.pop(0)
            continue
        if stop.is_set() or time.time() >= until:
            _log(args, "the cancelled run is still finishing in this process; no new attempt in this period")
            return False
        if not told:
            _log(args, "waiting for the cancelled run to stop before the next attempt")
            told = True
        cancelled[0].join(min(1.0, max(0.0, until - time.time())))
    return True


def _attempt(args: argparse.Namespace, deadline: float, cancelled: list[threading.Thread]) -> dict[str, Any]:
    """`run_once` with a deadline and a fresh lease: it runs in a worker thread, revoked if it overruns."""
    attempt = Attempt.open(run_options(args).server_dir)
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["summary"] = run_once(args, timeout=deadline, attempt=attempt)
        except BaseException as exc:  # handed to the scheduler's thread, which logs it
            result["error"] = exc

    worker = threading.Thread(target=work, name="federation-run", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        published = attempt.revoke()
        if args.simulation:
            cancelled.append(worker)
        before = f" (it had published {', '.join(published)} before it)" if published else ""
        raise ConfigError(
            f"the run did not finish within its deadline of {deadline:g} s; it was cancelled and nothing "
            f"it finishes later is published{before}"
        )
    if "error" in result:
        raise result["error"]
    return result["summary"]


def _cause(exc: BaseException) -> str:
    """One line naming what went wrong: our errors' sentence, or the exception type and its text."""
    text = " ".join(str(exc).split())
    if isinstance(exc, SpecSteerError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_last_start(path: Path) -> float | None:
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["last_start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_last_start(path: Path, when: float) -> None:
    from specsteer.federation.budget_ledger import atomic_write_json

    atomic_write_json(path, {"last_start": when})


# --- status ----------------------------------------------------------------------------------------


def status(args: argparse.Namespace) -> dict[str, Any]:
    from specsteer.federation.participant import Device
    from specsteer.federation.server_app import RUN_LOG
    from specsteer.federation.store import AdapterStore
    from specsteer.federation.task import TaskConfig

    state = args.state_dir.expanduser()
    if not state.is_dir():  # a mistyped folder would read as a federation with no adapter yet
        raise ConfigError(f"--state-dir {state} is not a folder of federation state (it does not exist or is a file).")
    server = state / "server"
    store = AdapterStore(server / "adapters")
    log = server / RUN_LOG
    runs = _read_runs(log) if log.is_file() else []
    device_dirs = list(args.device)
    devices_root = args.state_dir.expanduser() / "devices"
    if not device_dirs and devices_root.is_dir():
        device_dirs = sorted(p for p in devices_root.iterdir() if p.is_dir())
    devices = []
    for folder in device_dirs:
        device = Device(data_file=Path(), state_dir=folder, cfg=TaskConfig())
        # A device has a ledger once it first trains with DP; until then (a run interrupted before
        # its first step, or runs without DP) it spent nothing, and `privacy budget` finds nothing:
        # say so rather than print a ledger's figures from the defaults.
        has_ledger = device.ledger_path.is_file()
        devices.append({**device.status(), "ledger": str(device.ledger_path) if has_ledger else None})
    return {
        "server_state": str(server),
        "versions": store.versions(),
        "latest": store.latest(),
        "runs": runs[-5:],
        "devices": devices,
    }


def _read_runs(log: Path) -> list[dict[str, Any]]:
    """The run log's records, each with the fields `status` prints (`ConfigError` names a damaged line)."""
    try:
        text = log.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {log}: {getattr(exc, 'strerror', None) or 'it is not UTF-8 text'}.") from None
    runs = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            run = json.loads(line)
        except ValueError:
            run = None
        fields = ("run_id", "version_in", "version_out")
        if not (isinstance(run, dict) and all(k in run for k in fields) and isinstance(run.get("rounds"), list)):
            raise ConfigError(f"{log} is damaged: line {n} is not a JSON record of a run.")
        runs.append(run)
    return runs


def _print_status(result: dict[str, Any]) -> None:
    versions = result["versions"]
    if versions:
        print(f"global adapter: v{result['latest']} ({len(versions)} versions in {result['server_state']})")
    else:
        print(f"global adapter: none yet in {result['server_state']}")
    for run in result["runs"]:
        print(f"  run {run['run_id']}: v{run['version_in']} -> v{run['version_out']}, {len(run['rounds'])} round(s)")
    for dev in result["devices"]:
        if dev.get("ledger") is None:
            privacy = "no privacy ledger yet (it has taken no DP step), nothing spent"
        else:
            privacy = (
                f"ε {dev['epsilon_spent']:.3f} of {dev['epsilon_budget']:g} (δ={dev['delta']:g}, {dev['accountant']}), "
                f"{dev['dp_rounds']} DP round(s)"
            )
        print(
            f"device {dev['state_dir']}: {privacy}, global versions {dev['global_versions']}, "
            f"personal adapter {'yes' if dev['personal'] else 'no'}"
        )


# --- entry point -------------------------------------------------------------------------------------


def _log(args: argparse.Namespace, message: str) -> None:
    """Progress (INFO on `specsteer.federation.cli`): on stderr, unless `--quiet`."""
    logger.info("%s", message)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_cli_logging("federation", quiet=args.quiet, verbose=getattr(args, "verbose", False))
    from specsteer.federation.offline import go_offline, quiet_flower

    go_offline()  # before Flower or Hugging Face is imported by any command

    def command() -> int:
        if args.command == "device-state":
            written = device_state(args)
            print(json.dumps(written) if args.json else f"Device state written to {written['path']}.")
            return 0
        if args.command == "deploy":
            made = deploy(args)
            print(json.dumps(made)) if args.json else _print_deploy(made)
            return 0
        if args.command == "register-nodes":
            from specsteer.federation.deploy import register_allow_list

            ids = register_allow_list(
                args.superlink, args.allow_list, root_certificates=args.root_certificates, insecure=args.insecure
            )
            new_ids = [i for i in ids if i is not None]
            if args.json:
                print(json.dumps({"registered": new_ids, "already_registered": len(ids) - len(new_ids)}))
            else:
                print(f"{len(new_ids)} node key(s) registered, {len(ids) - len(new_ids)} already registered.")
            return 0
        if args.command == "status":
            result = status(args)
            if args.json:
                print(json.dumps(result))
            else:
                _print_status(result)
            return 0
        quiet_flower(args.verbose)
        if args.command == "schedule":
            return schedule(args)
        summary = run_once(args)
        _print_summary(args, summary)
        rounds = summary.get("rounds", [])
        if rounds and not any(_trained(r) for r in rounds):
            # Printed above, but a run in which no device trained is no success to a script.
            raise RunFailed(_none_trained(rounds))
        return 0

    return reported("federation", command)


if __name__ == "__main__":
    sys.exit(main())
