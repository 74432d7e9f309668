"""Issue 51: would choosing γ per device move SpecSteer above both baselines? Measured on the
generations a personal-loop run already made (no model runs here): every γ row of its runs log,
scored with the split style measures, and three ways to pick each author's γ:

- `default`: γ 0.5 for everyone (what ships);
- `per-device (held out)`: for each query, the γ that scored best on the *same author's other*
  queries: what a device could learn by replaying its own past subjects against the verifier
  (a past commit's subject, its real body to score against), never the query it is scored on;
- `per-device (oracle)`: each author's best γ on their own scored queries: an upper bound no
  device can reach (it picks with the answers), to say whether any per-device γ could.

The score a device maximises is the goal's: the smaller of its two standardised margins, ROUGE-L
over `llm` and attribution over `slm-rag+adapters`, each divided by the default row's spread of
that margin over the queries (a fixed scale, so neither measure decides alone). Each rule's
margins are reported as paired 95 % bootstrap intervals over the queries, as bench.personal_loop's.

    python -m bench.per_device_gamma --runs docs/results/personal_loop_shipped/personal_loop.runs.jsonl \\
        --out docs/results/per_device_gamma
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.dataset import first_users
from bench.personal_loop import planned_queries
from bench.personal_loop_report import score_rows, style_measures
from bench.quality import BOOTSTRAP_RESAMPLES, bootstrap_ci

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "commit-bodies-dev.jsonl"
LLM = "llm"
DEVICE = "slm-rag+adapters (dp)"  # the style baseline: the device alone with its adapters
DEFAULT_GAMMA = 0.5
# γ -> the runs log's row (bench.personal_loop's labels; γ 0.5 is the default row's own label).
GAMMA_ROWS = {
    0.1: "specsteer+adapters (dp, gamma 0.1)",
    0.2: "specsteer+adapters (dp, gamma 0.2)",
    0.3: "specsteer+adapters (dp, gamma 0.3)",
    0.5: "specsteer+adapters (dp)",
    0.7: "specsteer+adapters (dp, gamma 0.7)",
}
RULES = ("default", "per-device (held out)", "per-device (oracle)")

Key = tuple[str, str]  # (author, subject)


def margins(scored: list[dict[str, Any]], gammas: Sequence[float]) -> dict[float, dict[Key, tuple[float, float]]]:
    """γ -> query -> (ROUGE-L minus `llm`'s, attribution minus `slm-rag+adapters`'), on the queries
    every row has."""
    by = {(r["user"], r["subject"], r["config"]): r for r in scored}
    keys = sorted({(u, s) for u, s, _ in by})
    wanted = [LLM, DEVICE, *(GAMMA_ROWS[g] for g in gammas)]
    keys = [k for k in keys if all((*k, c) in by for c in wanted)]
    return {
        g: {
            k: (
                by[(*k, GAMMA_ROWS[g])]["rougeL"] - by[(*k, LLM)]["rougeL"],
                by[(*k, GAMMA_ROWS[g])]["attribution"] - by[(*k, DEVICE)]["attribution"],
            )
            for k in keys
        }
        for g in gammas
    }


def score(m: dict[Key, tuple[float, float]], keys: Sequence[Key], scale: tuple[float, float]) -> float:
    """The goal's score of one γ over `keys`: the smaller standardised mean margin."""
    r = statistics.fmean(m[k][0] for k in keys) / scale[0]
    a = statistics.fmean(m[k][1] for k in keys) / scale[1]
    return min(r, a)


def choose(m: dict[float, dict[Key, tuple[float, float]]], keys: Sequence[Key], scale: tuple[float, float]) -> float:
    """The γ with the best score over `keys` (ties: the one nearer the default, then the larger)."""
    return max(m, key=lambda g: (score(m[g], keys, scale), -abs(g - DEFAULT_GAMMA), g))


def picks(m: dict[float, dict[Key, tuple[float, float]]], rule: str, scale: tuple[float, float]) -> dict[Key, float]:
    """The γ each query is generated with under `rule`."""
    keys = list(m[DEFAULT_GAMMA])
    if rule == "default":
        return dict.fromkeys(keys, DEFAULT_GAMMA)
    out = {}
    for k in keys:
        mine = [j for j in keys if j[0] == k[0]]
        pool = mine if rule == "per-device (oracle)" else [j for j in mine if j != k]
        out[k] = choose(m, pool, scale) if pool else DEFAULT_GAMMA
    return out


def evaluate(scored: list[dict[str, Any]], gammas: Sequence[float] = tuple(GAMMA_ROWS)) -> dict[str, Any]:
    m = margins(scored, gammas)
    if DEFAULT_GAMMA not in m or not m[DEFAULT_GAMMA]:
        raise SystemExit("the runs log has no query with every row (llm, slm-rag+adapters and each gamma)")
    base = list(m[DEFAULT_GAMMA].values())
    scale = (statistics.stdev(x[0] for x in base), statistics.stdev(x[1] for x in base))
    rules = {}
    for rule in RULES:
        chosen = picks(m, rule, scale)
        rouge = [m[g][k][0] for k, g in chosen.items()]
        attribution = [m[g][k][1] for k, g in chosen.items()]
        rules[rule] = {
            "n": len(chosen),
            "rougeL_minus_llm": {"mean": statistics.fmean(rouge), "ci95": list(bootstrap_ci(rouge))},
            "attribution_minus_device": {
                "mean": statistics.fmean(attribution),
                "ci95": list(bootstrap_ci(attribution)),
            },
            "gammas": {g: sum(1 for x in chosen.values() if x == g) for g in gammas},
            "per_author": _per_author(chosen),
        }
    return {"scale": {"rougeL": scale[0], "attribution": scale[1]}, "gammas": list(gammas), "rules": rules}


def _per_author(chosen: dict[Key, float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for (author, _), g in sorted(chosen.items()):
        out.setdefault(author, []).append(g)
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Per-device γ: chosen from the author's own other queries, and the oracle bound",
        "",
        f"`{result['command']}`",
        "",
        f"{result['n_queries']} dev queries of {result['n_authors']} authors, the generations of "
        f"`{result['runs']}` (no model runs here), scored with the split style measures; γ in "
        f"{', '.join(f'{g:g}' for g in result['gammas'])}. A rule's margins: ROUGE-L minus `llm`, "
        f"attribution minus `{DEVICE}`, paired 95 % intervals ({BOOTSTRAP_RESAMPLES:,} bootstrap "
        "resamples of queries). The goal is both intervals above zero.",
        "",
        "| rule | n | ROUGE-L − `llm` | attribution − device | γ chosen (queries) |",
        "|---|---|---|---|---|",
    ]
    for rule, r in result["rules"].items():
        rl, at = r["rougeL_minus_llm"], r["attribution_minus_device"]
        used = ", ".join(f"{float(g):g}: {n}" for g, n in r["gammas"].items() if n)
        lines.append(
            f"| {rule} | {r['n']} | {rl['mean']:+.3f} [{rl['ci95'][0]:+.3f}, {rl['ci95'][1]:+.3f}] | "
            f"{at['mean']:+.3f} [{at['ci95'][0]:+.3f}, {at['ci95'][1]:+.3f}] | {used} |"
        )
    s = result["scale"]
    lines += [
        "",
        f"The score a rule maximises per author: min(mean ROUGE-L margin / {s['rougeL']:.3f}, mean attribution "
        f"margin / {s['attribution']:.3f}) (each divided by the default row's standard deviation of that margin "
        "over the queries). `per-device (held out)` picks each query's γ on the same author's other queries "
        "only; `per-device (oracle)` on all of the author's queries, the one scored included (an upper bound).",
        "",
        "γ per author and query (held out / oracle):",
        "",
    ]
    held, oracle = result["rules"]["per-device (held out)"], result["rules"]["per-device (oracle)"]
    for author, gs in held["per_author"].items():
        lines.append(
            f"- {author}: {' '.join(f'{g:g}' for g in gs)} / {' '.join(f'{g:g}' for g in oracle['per_author'][author])}"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.per_device_gamma", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="a bench.personal_loop runs log with every γ row")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the dev data the runs log was generated on")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--queries-per-user", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="writes OUT/per_device_gamma.{md,json}")
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"bench.per_device_gamma: error: no data file at {args.data}", file=sys.stderr)
        return 1
    users = first_users(args.data, args.users)
    queries = planned_queries(users, args.queries_per_user)
    wanted = {(u["user_id"], q["subject"]) for u, q in queries}
    rows = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if (r["user"], r["subject"]) in wanted]
    classifier, delta = style_measures(users)
    result = evaluate(score_rows(classifier, rows, queries, delta))
    result |= {
        "command": "python -m bench.per_device_gamma " + " ".join(sys.argv[1:] if argv is None else argv),
        "runs": str(args.runs),
        "n_queries": result["rules"]["default"]["n"],
        "n_authors": len(result["rules"]["default"]["per_author"]),
    }
    page = markdown(result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "per_device_gamma.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        (args.out / "per_device_gamma.md").write_text(page, encoding="utf-8")
    print(page, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
