"""A small sweep of gamma, alpha, K and k (and the Specialist) on dev users never reported elsewhere.

    python -m bench.sweep [--data ../shared/data/commit-bodies-dev.jsonl] [--skip-users 12] [--users 4]
                          [--queries-per-user 1] [--max-new-tokens 48] [--runs RUNS.jsonl] [--out docs/results]

The defaults of `SessionParams` and the default Specialist are chosen here, on users u12-u15
(`--skip-users 12 --users 4`), while `bench.quality` reports on u00-u11: the queries that pick a
setting are never the ones it is judged on. Each setting changes one knob from the base
(gamma 0.5, alpha 1, K 4, k 10, guardrail) so its effect can be read alone. Every generation is
appended to the runs log at once (a rerun resumes), and `sweep.{md,json}` are rewritten after each
setting with mean ROUGE-L, acceptance and tokens/s per setting (over the queries every reported
setting has finished).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench.quality import (
    DEFAULT_DATA,
    Key,
    Pairs,
    RunsLog,
    add_device_path_options,
    complete_queries,
    device_path,
    device_path_line,
    load_queries,
    rows_device_paths,
    scores,
)
from specsteer.core.model_registry import DEFAULT_GENERALIST
from specsteer.core.session_types import Method, SessionParams

QWEN05 = "qwen2.5-coder-0.5b-instruct"
SMOLLM2 = "smollm2-135m-instruct"
BASE = SessionParams(gamma=0.5, alpha=1.0, draft_len=4, top_k=10)
# A summary row's scores (`bench.quality.scores`), in the order sweep.json has always had them.
SUMMARY_FIELDS = ("n", "rougeL", "rougeL_se", "rouge1", "rouge1_se", "acceptance", "tokens_per_second")


@dataclass(frozen=True)
class Setting:
    label: str
    specialist: str
    params: SessionParams


SETTINGS: tuple[Setting, ...] = (
    Setting("slm-rag qwen0.5b", QWEN05, SessionParams(method=Method.SLM_RAG)),
    Setting("slm-rag smollm2", SMOLLM2, SessionParams(method=Method.SLM_RAG)),
    Setting("base qwen0.5b", QWEN05, BASE),
    Setting("base smollm2", SMOLLM2, BASE),
    Setting("gamma=0.1", QWEN05, replace(BASE, gamma=0.1)),
    Setting("gamma=2.0", QWEN05, replace(BASE, gamma=2.0)),
    Setting("alpha=0.5", QWEN05, replace(BASE, alpha=0.5)),
    Setting("alpha=2.0", QWEN05, replace(BASE, alpha=2.0)),
    Setting("K=8", QWEN05, replace(BASE, draft_len=8)),
    Setting("k=3", QWEN05, replace(BASE, top_k=3)),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--skip-users", type=int, default=12, help="users before these are reported by bench.quality")
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--queries-per-user", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--settings", nargs="*", default=None, help="labels to run (default: all)")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--runs", type=Path, default=None, help="the runs log (default: OUT/sweep.runs.jsonl)")
    p.add_argument("--report-only", action="store_true", help="write the tables from the runs log, generate nothing")
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument(
        "--specialist-map",
        nargs="*",
        default=[],
        metavar="NAME=MODEL",
        help="replace a Specialist by another model (tests use tiny ones)",
    )
    add_device_path_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.data.is_file():
        print(f"bench.sweep: error: no data file at {args.data}", file=sys.stderr)
        return 1
    remap = dict(item.split("=", 1) for item in args.specialist_map)
    queries = load_queries(args.data, args.users, args.queries_per_user, skip_users=args.skip_users)
    settings = [s for s in SETTINGS if args.settings is None or s.label in args.settings]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = RunsLog(args.runs if args.runs is not None else args.out / "sweep.runs.jsonl", "setting")
    command = "python -m bench.sweep " + " ".join(argv if argv is not None else sys.argv[1:])
    pairs = Pairs(args.generalist, drafter=args.drafter, drafter_precision=args.drafter_precision, guard=args.guard)
    started = time.perf_counter()
    # Setting by setting (each over all users), in the order of SETTINGS: the Specialist comparison
    # first, so a partial sweep still decides the most consequential default on every user.
    for setting in settings if not args.report_only else []:
        model = remap.get(setting.specialist, setting.specialist)
        for user, query in queries:
            runs.run(pairs, model, user, query, setting.label, setting.params, args.max_new_tokens, width=18)
        write_report(args, queries, settings, runs.done, command, time.perf_counter() - started)
    write_report(args, queries, settings, runs.done, command, time.perf_counter() - started)
    print(f"wrote {args.out}/sweep.md, sweep.json", flush=True)
    return 0


def write_report(
    args: argparse.Namespace,
    queries: list[tuple[dict, dict]],
    settings: list[Setting],
    done: dict[Key, dict],
    command: str,
    seconds: float,
) -> None:
    """Per setting, over the queries it has finished (its n); a finished sweep has one query set."""
    complete = complete_queries(queries, [s.label for s in settings], done, args.max_new_tokens)
    summary = []
    for s in settings:
        keys = [(u["user_id"], q["subject"], s.label, args.max_new_tokens) for u, q in queries]
        rows = [done[k] for k in keys if k in done]
        if not rows:
            continue
        stats = scores(rows)
        summary.append(
            {
                "setting": s.label,
                "specialist": s.specialist,
                "params": {k: str(v) for k, v in asdict(s.params).items()},
                **{k: stats[k] for k in SUMMARY_FIELDS},
            }
        )
    meta = {
        "command": command,
        "users": sorted({u["user_id"] for u, _ in queries}),
        "queries_planned": len(queries),
        "queries_complete": len(complete),
        "max_new_tokens": args.max_new_tokens,
        "generalist": args.generalist,
        "device_path": device_path(args.drafter, args.drafter_precision, args.guard),
        "rows_device_paths": rows_device_paths([done[k] for k in done if k[2] in {s.label for s in settings}]),
        "wall_seconds_this_run": round(seconds, 1),
    }
    (args.out / "sweep.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n")
    (args.out / "sweep.md").write_text(markdown(summary, meta))


def markdown(summary: list[dict], meta: dict) -> str:
    lines = [
        "# Sweep: gamma, alpha, K, k and the Specialist on dev users (greedy)",
        "",
        f"`{meta['command']}` — users {', '.join(meta['users'])} (never reported by `bench.quality`), "
        f"{meta['queries_complete']} of {meta['queries_planned']} queries have every setting done (each row's n "
        "counts its own), "
        f"max {meta['max_new_tokens']} new tokens, Generalist `{meta['generalist']}`. "
        "Each setting changes one knob of the base (gamma 0.5, alpha 1, K 4, k 10, guardrail).",
        "",
        device_path_line(meta.get("rows_device_paths", {})),
        "",
        "| setting | Specialist | n | ROUGE-L (± se) | ROUGE-1 (± se) | acceptance | tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        acc = "—" if math.isnan(s["acceptance"]) else f"{s['acceptance']:.2f}"
        lines.append(
            f"| {s['setting']} | {s['specialist']} | {s['n']} | {s['rougeL']:.3f} ± {s['rougeL_se']:.3f} | "
            f"{s['rouge1']:.3f} ± {s['rouge1_se']:.3f} | {acc} | {s['tokens_per_second']:.2f} |"
        )
    steered = [s for s in summary if "slm-rag" not in s["setting"]]
    full = max((s["n"] for s in steered), default=0)
    best = max((s for s in steered if s["n"] == full), key=lambda s: s["rougeL"], default=None)
    if best is not None:
        spread = statistics.pstdev([s["rougeL"] for s in steered if s["n"] == full])
        lines += [
            "",
            f"Best ROUGE-L among the settings with n = {full}: `{best['setting']}` ({best['rougeL']:.3f}; "
            f"spread over those settings {spread:.3f}).",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
