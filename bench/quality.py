"""Quality benchmark (the shape of the paper's Tables 2 and 10) on real data.

    python -m bench.quality [--data ../shared/data/commit-bodies-dev.jsonl] [--users 3] [--queries-per-user 1]
                            [--max-new-tokens 64] [--limit N] [--out docs/results]

For each dev user, the first queries (a fixed subset) are generated with every method on the
embedded default pair (greedy), scored with ROUGE-1/ROUGE-L against the real commit body, and
written as docs/results/quality.{md,json,png}. Results are appended to a JSON-lines log as they
come, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rouge_score import rouge_scorer

from bench.plotting import figure
from core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, load_causal_lm
from core.prompts import task_prompt
from core.session_types import CandidatePolicy, Method, SessionParams
from sdk.context import Profile
from sdk.device import DecodeOptions, Specialist, generate
from sdk.transport import InProcessVerifier
from server.session import CloudVerifier

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"


@dataclass(frozen=True)
class Config:
    label: str
    params: SessionParams


CONFIGS: tuple[Config, ...] = (
    Config("slm", SessionParams(method=Method.SLM)),
    Config("slm-rag", SessionParams(method=Method.SLM_RAG)),
    Config("llm", SessionParams(method=Method.LLM, draft_len=0, alpha=0.0)),
    Config("sd (K=4)", SessionParams(method=Method.SD)),
    Config("fusion (alpha=1)", SessionParams(method=Method.FUSION, draft_len=0)),
    Config("specsteer gamma=1.0", SessionParams(gamma=1.0)),
    Config("specsteer gamma=0.5", SessionParams(gamma=0.5)),
    Config("specsteer gamma=0.1", SessionParams(gamma=0.1)),
    Config("specsteer gamma=0.01", SessionParams(gamma=0.01)),
    Config("specsteer gamma=0.5 literal top-k", SessionParams(gamma=0.5, policy=CandidatePolicy.LITERAL)),
)


def load_queries(path: Path, users: int, per_user: int) -> list[tuple[dict, dict]]:
    """(user object, query) pairs: the first `per_user` queries of the first `users` users."""
    out: list[tuple[dict, dict]] = []
    with path.open(encoding="utf-8") as f:
        for line in list(f)[:users]:
            user = json.loads(line)
            out.extend((user, q) for q in user["queries"][:per_user])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.quality", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    # 3 queries x 10 configurations: about 30-45 min on 2 idle cores (each generation 10-130 s).
    p.add_argument("--users", type=int, default=3)
    p.add_argument("--queries-per-user", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="at most this many queries (a quick run)")
    p.add_argument("--configs", nargs="*", default=None, help="labels to run (default: all)")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"bench.quality: error: no data file at {args.data}", file=sys.stderr)
        return 1
    queries = load_queries(args.data, args.users, args.queries_per_user)[: args.limit]
    configs = [c for c in CONFIGS if args.configs is None or c.label in args.configs]
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "quality.runs.jsonl"
    done = _read_log(log)

    s_lm = load_causal_lm(args.specialist)
    g_lm = load_causal_lm(args.generalist)
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    started = time.perf_counter()
    for user, query in queries:
        specialist = Specialist(s_lm, Profile.from_obj(user, source=user["user_id"]))
        prompt = task_prompt(query["subject"])
        for config in configs:
            key = (user["user_id"], query["subject"], config.label, args.max_new_tokens)
            if key in done:
                continue
            out = generate(specialist, prompt, config.params, options, verifier)
            scores = scorer.score(query["target"], out.text)
            row = {
                "user": user["user_id"],
                "subject": query["subject"],
                "config": config.label,
                "max_new_tokens": args.max_new_tokens,
                "rouge1": scores["rouge1"].fmeasure,
                "rougeL": scores["rougeL"].fmeasure,
                "text": out.text,
                **out.stats.as_dict(),
            }
            with log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            done[key] = row
            print(
                f"{user['user_id']} {config.label:38s} R-L {row['rougeL']:.3f} acc {row['acceptance_rate']:.2f} "
                f"{row['seconds']:.0f}s",
                flush=True,
            )
    wanted = {(u["user_id"], q["subject"], c.label, args.max_new_tokens) for u, q in queries for c in configs}
    rows = [r for k, r in done.items() if k in wanted]
    summary = summarize(rows, [c.label for c in configs])
    meta = {
        "command": "python -m bench.quality " + " ".join(argv if argv is not None else sys.argv[1:]),
        "queries": len(queries),
        "users": len({u["user_id"] for u, _ in queries}),
        "max_new_tokens": args.max_new_tokens,
        "specialist": args.specialist,
        "generalist": args.generalist,
        "wall_seconds_this_run": round(time.perf_counter() - started, 1),
        "configs": [{"label": c.label, **{k: str(v) for k, v in asdict(c.params).items()}} for c in configs],
    }
    (args.out / "quality.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n")
    (args.out / "quality.md").write_text(markdown(summary, meta))
    plot(summary, args.out / "quality.png")
    print(f"wrote {args.out}/quality.md, quality.json, quality.png")
    return 0


def _read_log(path: Path) -> dict[tuple[str, str, str, int], dict]:
    """Finished generations by (user, subject, config, max new tokens): a rerun with another
    length does not mix in rows of the old one."""
    done: dict[tuple[str, str, str, int], dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                done[(row["user"], row["subject"], row["config"], row.get("max_new_tokens", 0))] = row
    return done


def summarize(rows: list[dict], labels: list[str]) -> list[dict]:
    """Per config: mean ROUGE over queries, the spread of per-user means, acceptance, speed."""
    out = []
    for label in labels:
        mine = [r for r in rows if r["config"] == label]
        if not mine:
            continue
        per_user: dict[str, list[float]] = {}
        for r in mine:
            per_user.setdefault(r["user"], []).append(r["rougeL"])
        user_means = [statistics.fmean(v) for v in per_user.values()]
        drafted = sum(r["drafted"] for r in mine)
        out.append(
            {
                "config": label,
                "n": len(mine),
                "rouge1": statistics.fmean(r["rouge1"] for r in mine),
                "rougeL": statistics.fmean(r["rougeL"] for r in mine),
                "rougeL_user_sd": statistics.stdev(user_means) if len(user_means) > 1 else 0.0,
                "rougeL_user_min": min(user_means),
                "rougeL_user_max": max(user_means),
                "acceptance": sum(r["accepted"] for r in mine) / drafted if drafted else math.nan,
                "tokens_per_second": sum(r["new_tokens"] for r in mine) / sum(r["seconds"] for r in mine),
                "uplink_bytes_per_token": sum(r["uplink_bytes"] for r in mine)
                / max(1, sum(r["new_tokens"] for r in mine)),
            }
        )
    return out


def markdown(summary: list[dict], meta: dict) -> str:
    lines = [
        "# Quality: ROUGE on commit-bodies-dev (greedy, embedded default pair)",
        "",
        f"`{meta['command']}` — {meta['queries']} queries from {meta['users']} users, "
        f"max {meta['max_new_tokens']} new tokens, "
        f"Specialist `{meta['specialist']}`, Generalist `{meta['generalist']}`.",
        "",
        "| config | n | ROUGE-1 | ROUGE-L | per-user ROUGE-L sd [min, max] | acceptance | tok/s | uplink B/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        acc = "—" if math.isnan(s["acceptance"]) else f"{s['acceptance']:.2f}"
        lines.append(
            f"| {s['config']} | {s['n']} | {s['rouge1']:.3f} | {s['rougeL']:.3f} | "
            f"{s['rougeL_user_sd']:.3f} [{s['rougeL_user_min']:.3f}, {s['rougeL_user_max']:.3f}] | {acc} | "
            f"{s['tokens_per_second']:.2f} | {s['uplink_bytes_per_token']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(summary: list[dict], path: Path) -> None:
    with figure(path, (10, 4.5)) as ax:
        labels = [s["config"] for s in summary]
        means = [s["rougeL"] for s in summary]
        errs = [s["rougeL_user_sd"] for s in summary]
        ax.bar(range(len(labels)), means, yerr=errs, capsize=4, color="#4c72b0")
        ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("ROUGE-L (bars: sd of per-user means)")
        ax.set_title("Quality on commit-bodies-dev")


if __name__ == "__main__":
    sys.exit(main())
