"""Paired ROUGE differences between two `bench.quality` runs logs (e.g. int8 against fp32).

    python -m bench.compare_runs --runs A.jsonl --baseline B.jsonl [--out docs/results/quantize_quality.md]

For every configuration both logs ran on the same (user, subject, max_new_tokens), the mean
difference A - B of ROUGE-1 and ROUGE-L with its 95 % bootstrap interval, next to the standard
error of the baseline's own scores (the bar a numerics change must stay under), and how many
generations came out identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.quality import RunsLog, bootstrap_ci, mean_se


def compare(runs: Path, baseline: Path) -> list[dict]:
    """One entry per configuration present in both logs."""
    a, b = RunsLog(runs, "config").done, RunsLog(baseline, "config").done
    shared = sorted(set(a) & set(b))
    out = []
    for config in sorted({k[2] for k in shared}):
        keys = [k for k in shared if k[2] == config]
        entry: dict = {"config": config, "n": len(keys), "identical": sum(a[k]["text"] == b[k]["text"] for k in keys)}
        for metric in ("rouge1", "rougeL"):
            diffs = [a[k][metric] - b[k][metric] for k in keys]
            mean, _ = mean_se(diffs)
            lo, hi = bootstrap_ci(diffs)
            _, base_se = mean_se([b[k][metric] for k in keys])
            entry[metric] = {"mean_diff": mean, "ci95": [lo, hi], "baseline_se": base_se}
        out.append(entry)
    return out


def markdown(result: list[dict], command: str) -> str:
    lines = [
        "# Paired ROUGE differences between two runs logs",
        "",
        f"`{command}`",
        "",
        "| config | n | identical texts | ROUGE-L diff | 95 % interval | baseline ROUGE-L se "
        "| ROUGE-1 diff | 95 % interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in result:
        rl, r1 = e["rougeL"], e["rouge1"]
        lines.append(
            f"| {e['config']} | {e['n']} | {e['identical']} | {rl['mean_diff']:+.3f} | "
            f"[{rl['ci95'][0]:+.3f}, {rl['ci95'][1]:+.3f}] | {rl['baseline_se']:.3f} | {r1['mean_diff']:+.3f} | "
            f"[{r1['ci95'][0]:+.3f}, {r1['ci95'][1]:+.3f}] |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.compare_runs", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, required=True, help="the runs log under test (A)")
    p.add_argument("--baseline", type=Path, required=True, help="the runs log to compare with (B)")
    p.add_argument("--out", type=Path, default=None, help="write the table here (and the JSON next to it)")
    args = p.parse_args(argv)
    for path in (args.runs, args.baseline):
        if not path.is_file():
            print(f"bench.compare_runs: error: no runs log at {path}", file=sys.stderr)
            return 1
    result = compare(args.runs, args.baseline)
    command = "python -m bench.compare_runs " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(result, command)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps({"command": command, "configs": result}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
