"""Canary exposure of the released global adapter, trained with and without DP ("The Secret Sharer").

    python -m bench.adapter_canary [--model smollm2-135m-instruct] [--data .../commit-bodies-dev.jsonl]
        [--users 3] [--planted 2] [--history 24] [--repetitions 8] [--rounds 2] [--dp-steps 8]
        [--dp both|on|off] [--noise-multiplier 1.0] [--epsilon 8] [--lr 0.02] [--lora-rank 8]
        [--lora-targets q_proj,...] [--max-len 128] [--secret-length 4] [--controls 50] [--seed 0]
        [--threads 1] [--no-base] [--out docs/results] [--name adapter_canary] [--work DIR]

Canaries ("my PIN is 4839", `privacy.adapter_exposure.CanaryRecord`: a history entry of its own
under a fixed subject line, its body a random secret of `--secret-length` digits) are planted in
the histories of the first `--planted` of the `--users` devices (one secret each, `--repetitions`
copies at random places among the trained entries; `privacy.adapter_exposure.plant_canary_records`).
`--controls` more secrets of the same space are drawn and planted nowhere. Then real federated runs
train the global adapter: `federation run --simulation` as the CLI builds it (its run config and
simulated devices, `federation.cli.run_config_from_args` / `simulation_nodes`; the real ServerApp
and ClientApps through `federation.simulation.run_in_process`, real Opacus DP-SGD), once with
`--no-dp` and once with DP at `--noise-multiplier`, from the same data and settings. Personal
adapters are not trained (`--personal-steps 0`): they never leave the device; what is measured is
what the server releases.

For each run, the base model with the run's last global adapter merged in
(`privacy.adapter_exposure.adapter_model`, what the verifier runs as P_S^0) scores every secret of
the space by the likelihood of its canary body after the canary's prompt in the global adapter's
training format; each planted canary and each control is ranked exactly among all of them
(`privacy.adapter_exposure.model_exposures`): exposure = log2|R| - log2(rank). The base model (v0)
is scored too (`--no-base` skips it). The DP run's ε is read from each device's ledger, as the
device claims it (commit-level, at the device's δ and accountant).

Results: `<out>/<name>.md` and `.json` (the exposures and ranks, never the secrets); the secrets
stay in `<work>/canaries.json` (planted, `privacy.data` format) and `<work>/secrets.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.dataset import first_users
from specsteer.core.models import CausalLM, load_causal_lm
from specsteer.privacy.accounting import epsilon_of, read_ledger_file
from specsteer.privacy.adapter_exposure import (
    DEFAULT_CANARY_SUBJECT,
    CanaryRecord,
    LikelihoodExposure,
    adapter_model,
    exposure_summary,
    model_exposures,
    plant_canary_records,
)
from specsteer.privacy.data import Canary, write_canaries
from specsteer.privacy.leakage import CanarySpace

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
HOLDOUT = 4  # TaskConfig.holdout: the newest entries a device never trains on
RUNS = {"off": ("no-dp", "no DP"), "on": ("dp", "DP-SGD")}


def _default_data() -> Path:
    """../shared/data/commit-bodies-dev.jsonl next to the repository (or next to a worktree's parent)."""
    here = Path(__file__).resolve()
    for parent in here.parents[1:4]:
        candidate = parent / "shared" / "data" / "commit-bodies-dev.jsonl"
        if candidate.is_file():
            return candidate
    return here.parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.adapter_canary", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"the Specialist (default {DEFAULT_MODEL})")
    p.add_argument("--data", type=Path, default=None, help="dataset JSONL, one user a line (default: the dev data)")
    p.add_argument("--users", type=int, default=3, help="simulated devices: the first N users of --data")
    p.add_argument("--planted", type=int, default=None, help="devices with a planted canary (default users - 1)")
    p.add_argument("--history", type=int, default=24, help="newest history entries kept per user (4 held out)")
    p.add_argument("--repetitions", type=int, default=8, help="copies of each planted canary in its history")
    p.add_argument("--rounds", type=int, default=2, help="federated rounds per run")
    p.add_argument("--dp-steps", type=int, default=8, help="global-adapter steps per device and round (SGD or DP-SGD)")
    p.add_argument("--dp", choices=("both", "on", "off"), default="both", help="which runs: with DP, without, both")
    p.add_argument("--noise-multiplier", type=float, default=1.0, help="DP-SGD noise multiplier of the DP run")
    p.add_argument("--epsilon", type=float, default=8.0, help="each device's ε budget (default 8, the device default)")
    p.add_argument("--lr", type=float, default=0.02, help="global-adapter learning rate (SGD, momentum 0.9)")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-targets", default=DEFAULT_TARGETS)
    p.add_argument("--max-len", type=int, default=128, help="tokens per training sequence")
    p.add_argument("--secret-length", type=int, default=4, help="digits of a secret: |R| = 10^length")
    p.add_argument("--subject", default=DEFAULT_CANARY_SUBJECT, help="the subject line of a canary entry")
    p.add_argument("--controls", type=int, default=50, help="secrets drawn from the same space, planted nowhere")
    p.add_argument("--seed", type=int, default=0, help="draws the secrets and their places (DP noise never)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--chunk-tokens", type=int, default=1024, help="tokens per scoring forward pass")
    p.add_argument("--no-base", action="store_true", help="do not score the base model (v0)")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--name", default="adapter_canary", help="stem of the result files")
    p.add_argument("--work", type=Path, default=None, help="state and secrets (default: a temporary folder)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.data = args.data or _default_data()
    if args.planted is None:
        args.planted = max(1, args.users - 1)
    problem = _check(args)
    if problem:
        print(f"bench.adapter_canary: error: {problem}", file=sys.stderr)
        return 1
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        return _run(args, args.work.resolve(), started, argv)
    with tempfile.TemporaryDirectory(prefix="bench-adapter-canary-") as tmp:
        return _run(args, Path(tmp), started, argv)


def _check(args: argparse.Namespace) -> str | None:
    if not args.data.is_file():
        return f"no data file at {args.data}"
    if args.users < 1 or not 1 <= args.planted <= args.users:
        return "need --users >= 1 and 1 <= --planted <= --users"
    if args.history < HOLDOUT + 2 or args.repetitions < 1 or args.rounds < 1 or args.dp_steps < 1:
        return f"need --history >= {HOLDOUT + 2}, --repetitions >= 1, --rounds >= 1, --dp-steps >= 1"
    if not 1 <= args.secret_length <= 6 or args.controls < 1:
        return "need 1 <= --secret-length <= 6 (|R| <= 10^6) and --controls >= 1"
    if 10**args.secret_length < args.planted + args.controls:
        return "the secret space is too small for that many planted and control secrets"
    if not args.noise_multiplier > 0 or not args.epsilon > 0 or not args.lr > 0 or args.lora_rank < 1:
        return "--noise-multiplier, --epsilon, --lr and --lora-rank must be positive"
    return None


def _run(args: argparse.Namespace, work: Path, started: float, argv: Sequence[str] | None) -> int:
    record = CanaryRecord(CanarySpace(length=args.secret_length), subject=args.subject)
    users = _read_users(args.data, args.users, args.history)
    if len(users) < args.users:
        print(f"bench.adapter_canary: error: {args.data} holds only {len(users)} users", file=sys.stderr)
        return 1
    rng = np.random.default_rng(args.seed)
    secrets_ = record.space.sample(rng, args.planted)
    controls = record.space.sample(rng, args.controls, exclude=secrets_)
    places = random.Random(args.seed)
    planted_users = [
        plant_canary_records(u, record, s, args.repetitions, places, keep_last=HOLDOUT)
        for u, s in zip(users[: args.planted], secrets_, strict=True)
    ]
    data = work / "data.jsonl"
    data.write_text("".join(json.dumps(u) + "\n" for u in [*planted_users, *users[args.planted :]]), encoding="utf-8")
    write_canaries(
        work / "canaries.json",
        record.space,
        [Canary(str(u["user_id"]), s) for u, s in zip(users[: args.planted], secrets_, strict=True)],
    )
    (work / "secrets.json").write_text(
        json.dumps({"planted": secrets_, "controls": controls}, indent=1) + "\n", encoding="utf-8"
    )
    user_ids = [str(u["user_id"]) for u in users]
    print(f"== {len(users)} devices ({', '.join(user_ids)}); canaries planted on {', '.join(user_ids[: args.planted])}")

    modes = ["off", "on"] if args.dp == "both" else [args.dp]
    runs: dict[str, dict[str, Any]] = {}
    for mode in modes:
        key, label = RUNS[mode]
        run = _train(args, data, work / key, dp=mode == "on")
        if run["problems"]:
            print(f"bench.adapter_canary: error: the {label} run: {'; '.join(run['problems'])}", file=sys.stderr)
            return 1
        runs[key] = run

    base = load_causal_lm(args.model, progress=False)
    models: list[tuple[str, str, int, CausalLM]] = []
    if not args.no_base:
        models.append(("base", "base model", 0, base))
    for key, run in runs.items():
        models.append((key, run["label"], run["version"], adapter_model(base, run["adapters"], run["version"])))
    scored: dict[str, dict[str, Any]] = {}
    for key, label, version, lm in models:
        print(f"== scoring all {record.space.size} secrets with {label} (v{version})", flush=True)
        t0 = time.perf_counter()
        exposures = model_exposures(lm, record, [*secrets_, *controls], chunk_tokens=args.chunk_tokens)
        scored[key] = {
            "label": label,
            "version": version,
            "seconds": time.perf_counter() - t0,
            "planted": exposures[: len(secrets_)],
            "controls": exposures[len(secrets_) :],
        }

    result = _result(args, argv, record, users, runs, scored, started)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    text = markdown(result)
    (args.out / f"{args.name}.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out}/{args.name}.md, {args.name}.json")
    return 0


def _read_users(path: Path, count: int, history: int) -> list[dict[str, Any]]:
    """The first `count` users of `path`, each with their newest `history` entries, no queries."""
    return [{"user_id": u.get("user_id"), "profile": u["profile"][-history:]} for u in first_users(path, count)]


def _train(args: argparse.Namespace, data: Path, state: Path, *, dp: bool) -> dict[str, Any]:
    """One `federation run --simulation` of the given data; the run's summary, adapters and ledgers."""
    from specsteer.federation.offline import quiet_flower
    from specsteer.federation.run_options import RunOptions
    from specsteer.federation.simulation import run_in_process

    options = RunOptions(
        state_dir=state,
        rounds=args.rounds,
        clients=args.users,
        data=data,
        model=str(args.model),
        dp=dp,
        epsilon=args.epsilon,
        noise_multiplier=args.noise_multiplier if dp else None,
        dp_steps=args.dp_steps,
        personal_steps=0,
        max_len=args.max_len,
    )
    # The `federation run` command line that asks for the same run (printed).
    argv = ["run", "--simulation", "--rounds", str(args.rounds), "--clients", str(args.users)]
    argv += ["--data", str(data), "--state-dir", str(state), "--model", str(args.model)]
    argv += ["--dp-steps", str(args.dp_steps), "--personal-steps", "0", "--max-len", str(args.max_len)]
    argv += ["--epsilon", repr(args.epsilon)]
    argv += ["--noise-multiplier", repr(args.noise_multiplier)] if dp else ["--no-dp"]
    config = options.run_config()
    # Run-config keys the CLI has no option for (every TaskConfig field is one).
    config.update(
        {
            "lr": args.lr,
            "lora-rank": args.lora_rank,
            "lora-alpha": 2 * args.lora_rank,
            "lora-targets": args.lora_targets,
            "seed": args.seed,
        }
    )
    nodes = options.simulation_nodes()
    for node in nodes:
        node["threads"] = args.threads
    label = RUNS["on" if dp else "off"][1] + (f" (σ = {args.noise_multiplier:g})" if dp else "")
    print(f"== {label}: federation {shlex.join(argv)} (+ {json.dumps({k: config[k] for k in ('lr', 'lora-rank')})})")
    quiet_flower(False)
    t0 = time.perf_counter()
    summary, _ = run_in_process(config, nodes)
    seconds = time.perf_counter() - t0
    problems = [
        f"round {r['server_round']}: {r.get('replies', 0)} of {len(nodes)} devices trained {r.get('refusals')}"
        for r in summary.get("rounds", [])
        if r.get("replies", 0) != len(nodes)
    ]
    if summary.get("version_out") is None or summary.get("version_out") == summary.get("version_in"):
        problems.append("no new global adapter version")
    devices = []
    for node in nodes:
        ledger = read_ledger_file(Path(node["state-dir"]) / "ledger.json")
        entry: dict[str, Any] = {"user": node.get("user-id") or f"part{node['partition-id']}"}
        if ledger is not None and ledger.history:
            entry.update(
                {
                    "epsilon": epsilon_of(ledger.history, ledger.delta, ledger.accountant),
                    "delta": ledger.delta,
                    "accountant": ledger.accountant,
                    "history": [list(h) for h in ledger.history],
                }
            )
        loss = _held_out_loss(Path(node["state-dir"]), summary.get("run_id"))
        if loss is not None:
            entry["held_out_loss"] = loss
        devices.append(entry)
    return {
        "label": label,
        "dp": dp,
        "noise_multiplier": args.noise_multiplier if dp else None,
        "federation_argv": argv,
        "run_config": {k: v for k, v in config.items() if k != "server-state-dir"},
        "version": int(summary.get("version_out") or 0),
        "adapters": str(Path(config["server-state-dir"]) / "adapters"),
        "seconds": seconds,
        "devices": devices,
        "problems": problems,
    }


def _held_out_loss(state: Path, run_id: Any) -> float | None:
    """The device's held-out loss with the run's last global adapter, from its own round log."""
    log = state / "rounds.jsonl"
    if not log.is_file():
        return None
    loss = None
    for line in log.read_text(encoding="utf-8").splitlines():
        event = json.loads(line) if line.strip() else {}
        if event.get("event") == "evaluate" and event.get("run_id") == run_id:
            loss = event.get("loss-global")
    return float(loss) if isinstance(loss, int | float) else None


def _exposures(items: Sequence[LikelihoodExposure]) -> list[dict[str, Any]]:
    return [e.as_dict(reveal=False) for e in items]


def _result(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    record: CanaryRecord,
    users: Sequence[dict[str, Any]],
    runs: dict[str, dict[str, Any]],
    scored: dict[str, dict[str, Any]],
    started: float,
) -> dict[str, Any]:
    command = shlex.join(["python", "-m", "bench.adapter_canary", *(argv if argv is not None else sys.argv[1:])])
    planted = []
    for i in range(args.planted):
        row: dict[str, Any] = {"canary": i + 1, "user": str(users[i]["user_id"]), "copies": args.repetitions}
        row["exposure"] = {key: s["planted"][i].exposure for key, s in scored.items()}
        row["rank"] = {key: s["planted"][i].rank for key, s in scored.items()}
        planted.append(row)
    return {
        "command": command,
        "settings": {
            "model": args.model,
            "data": str(args.data),
            "users": [str(u["user_id"]) for u in users],
            "planted_on": [str(u["user_id"]) for u in users[: args.planted]],
            "history_entries": args.history,
            "held_out": HOLDOUT,
            "repetitions": args.repetitions,
            "rounds": args.rounds,
            "dp_steps": args.dp_steps,
            "batch_size": 4,
            "lr": args.lr,
            "lora_rank": args.lora_rank,
            "lora_targets": args.lora_targets,
            "max_len": args.max_len,
            "noise_multiplier": args.noise_multiplier,
            "epsilon_budget": args.epsilon,
            "controls": args.controls,
            "seed": args.seed,
            "threads": args.threads,
        },
        "canary": {**record.as_dict(), "size": record.space.size},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPU",
        "seconds": time.perf_counter() - started,
        "runs": {k: {kk: vv for kk, vv in r.items() if kk != "problems"} for k, r in runs.items()},
        "models": {
            key: {
                "label": s["label"],
                "version": s["version"],
                "seconds": s["seconds"],
                "planted": _exposures(s["planted"]),
                "controls": _exposures(s["controls"]),
                "controls_summary": exposure_summary([e.exposure for e in s["controls"]]),
                "planted_summary": exposure_summary([e.exposure for e in s["planted"]]),
            }
            for key, s in scored.items()
        },
        "planted": planted,
    }


def _eps_text(run: dict[str, Any]) -> str:
    devices = [d for d in run["devices"] if "epsilon" in d]
    if not devices:
        return "no ε (no DP)"
    first = devices[0]
    each = ", ".join(f"{d['user']} {d['epsilon']:.3f}" for d in devices)
    return f"the ledgers claim ε = {each} (δ = {first['delta']:g}, {first['accountant'].upper()})"


def _loss_text(run: dict[str, Any]) -> str:
    losses = [f"{d['user']} {d['held_out_loss']:.3f}" for d in run["devices"] if "held_out_loss" in d]
    return f"; held-out loss with the global adapter: {', '.join(losses)}" if losses else ""


def markdown(result: dict[str, Any]) -> str:
    s, canary, models = result["settings"], result["canary"], result["models"]
    bits = canary["bits"]
    lines = [
        "# Canary exposure of the released global adapter (Secret Sharer)",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Model {s['model']}; {len(s['users'])} simulated devices ({', '.join(s['users'])}, newest "
        f"{s['history_entries']} history entries each, {s['held_out']} held out); a canary planted on "
        f"{', '.join(s['planted_on'])} (one secret each), {s['repetitions']} copies among the trained entries; "
        f"{s['rounds']} round(s) of {s['dp_steps']} global-adapter steps per device (batch 4, lr {s['lr']:g}, "
        f"LoRA rank {s['lora_rank']} on {s['lora_targets']}), {s['max_len']}-token sequences, no personal "
        f"training; {result['machine']}; "
        f"{result['seconds'] / 60:.1f} min in all.",
        "",
        f'A canary is a history entry with the subject "{canary["subject"]}" and the body '
        f'"{canary["space"]["template"]}", the secret {canary["space"]["length"]} digits: |R| = {canary["size"]:,} '
        f"({bits:.2f} bits). Every secret of R is scored by the likelihood of its body after its prompt in the global "
        f"adapter's training format, with the run's last global adapter merged into the base model; exposure = "
        f"log2|R| - log2(exact rank), at most {bits:.2f} bits. A secret the model knows nothing about has a uniformly "
        f"random rank: exposure >= x bits with probability 2^-x (mean 1.44). Controls: {s['controls']} secrets of the "
        "same space planted nowhere.",
        "",
    ]
    keys = list(models)
    head = "| canary | planted on | copies | " + " | ".join(
        f"{models[k]['label']}, v{models[k]['version']}" for k in keys
    )
    lines += [head + " |", "| --- | --- | --- | " + " | ".join("---" for _ in keys) + " |"]
    for row in result["planted"]:
        cells = [f"{row['exposure'][k]:.2f} (rank {row['rank'][k]:g})" for k in keys]
        lines.append(f"| planted {row['canary']} | {row['user']} | {row['copies']} | " + " | ".join(cells) + " |")
    for stat in ("mean", "median", "max"):
        cells = [f"{models[k]['controls_summary'][stat]:.2f}" for k in keys]
        lines.append(f"| controls ({s['controls']}): {stat} | — | 0 | " + " | ".join(cells) + " |")
    lines.append("")
    for run in result["runs"].values():
        lines.append(
            f"- {run['label']}: {run['seconds']:.0f} s of training, global adapter v{run['version']}; "
            f"{_eps_text(run)}{_loss_text(run)}."
        )
    if "dp" in result["runs"]:
        lines.append(
            "- The ledgers' ε is per commit (one DP example holds one commit); a canary in "
            f"{s['repetitions']} copies is {s['repetitions']} commits, protected as a group."
        )
    for key in keys:
        lines.append(
            f"- Scoring all {canary['size']:,} secrets with {models[key]['label']}: {models[key]['seconds']:.1f} s."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
