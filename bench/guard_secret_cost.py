"""What the history-secret detector costs a round as a history's secrets grow (a pasted lock file
registers hundreds), as a ratio to a history of four, in one run.

    python -m bench.guard_secret_cost [--counts 4 50 200 400] [--reps 20] [--out docs/results]

Each count builds `privacy.history_secrets.HistorySecretDetector` over that many random
`sha512-<base64>` integrity hashes and times `find` plus `hazard` (what the guard calls each
round) on a 560-character text that holds none of them, the best of `--reps` runs of five calls.
"""

from __future__ import annotations

import argparse
import base64
import random
import time
from pathlib import Path

from bench.results import write_results
from specsteer.privacy.history_secrets import HistorySecretDetector

TEXT = "The quick brown fox jumps over the lazy dog, then the build cache. " * 8


def integrity_hashes(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"sha512-{base64.b64encode(bytes(rng.randrange(256) for _ in range(64))).decode()}" for _ in range(n)]


def time_per_check(n: int, reps: int) -> tuple[float, float]:
    """(build seconds, seconds per find+hazard) for a history of `n` secrets."""
    t0 = time.perf_counter()
    detector = HistorySecretDetector(integrity_hashes(n))
    build = time.perf_counter() - t0
    detector.find(TEXT), detector.hazard(TEXT)  # warm the fold cache
    best = float("inf")
    for rep in range(reps):
        t0 = time.perf_counter()
        for i in range(5):
            detector.find(f"{TEXT}{rep}{i}")
            detector.hazard(f"{TEXT}{rep}{i}")
        best = min(best, (time.perf_counter() - t0) / 5)
    return build, best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[4, 50, 200, 400])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    for n in args.counts:
        build, check = time_per_check(n, args.reps)
        rows.append({"secrets": n, "build_s": build, "check_ms": check * 1000})
    base = rows[0]["check_ms"]
    for row in rows:
        row["check_ratio"] = row["check_ms"] / base
    command = "python -m bench.guard_secret_cost " + " ".join(argv if argv is not None else [])
    lines = [
        "# The history-secret detector's cost a round, by the number of history secrets",
        "",
        f"`{command.strip()}`",
        "",
        f"| secrets | build | find + hazard | / {args.counts[0]} secrets |",
        "|---|---|---|---|",
        *(
            f"| {r['secrets']} | {r['build_s']:.2f} s | {r['check_ms']:.2f} ms | {r['check_ratio']:.2f}x |"
            for r in rows
        ),
    ]
    page = "\n".join(lines) + "\n"
    print(page)
    if args.out is not None:
        write_results(args.out, "guard_secret_cost", {"command": command.strip(), "rows": rows}, page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
