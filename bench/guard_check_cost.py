"""What the egress guard's check costs per draft token, on the default Specialist's tokenizer alone.

    python -m bench.guard_check_cost [--profile sdk/data/demo_profile.json] [--draft-len 4] [--reps 3]
                                     [--label NAME] [--out DIR]

The guard the client builds by default for the profile (`guard_setting(profile, tok, "placeholder")`)
checks K + 1 tokens (the pending recovery and a K-token draft) after each round's worth of the
profile's own commit bodies, as `bench.device_work` times a check, without loading the model's
weights (only its tokenizer), so two source trees can be compared quickly: run it with each on
PYTHONPATH. Reports the median and p99 of a check, per draft token (check / K), the guard's build
time for the profile, and the process's peak RSS (the guard holds no model: its detectors are
regular expressions, word lists and the libraries' tables).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.core.models import load_causal_lm
from specsteer.sdk.context import Profile
from specsteer.sdk.uplink_guard import guard_setting


def measure(profile_path: Path, draft_len: int, reps: int) -> dict[str, Any]:
    tok = load_causal_lm(DEFAULT_SPECIALIST, weights=False, progress=False).tokenizer
    profile = Profile.from_file(profile_path)
    t0 = time.perf_counter()
    guard = guard_setting(profile, tok, "placeholder")
    build = time.perf_counter() - t0
    assert guard is not None
    session = guard.for_prompt("Write the commit body.")
    block = draft_len + 1
    times: list[float] = []
    for _ in range(reps):
        for entry in profile.entries:
            ids = list(tok.encode(entry.body or entry.subject, add_special_tokens=False))
            for i in range(0, max(1, len(ids) - block + 1), block):
                new = ids[i : i + block]
                t = time.perf_counter()
                session.check(ids[:i], new, tok, send=len(new))
                times.append(time.perf_counter() - t)
    times.sort()
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    median = statistics.median(times)
    return {
        "checks": len(times),
        "draft_len": draft_len,
        "check_median_ms": round(median * 1000, 3),
        "check_p99_ms": round(p99 * 1000, 3),
        "per_draft_token_median_ms": round(median * 1000 / draft_len, 3),
        "per_draft_token_p99_ms": round(p99 * 1000 / draft_len, 3),
        "build_s": round(build, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard_check_cost")
    parser.add_argument("--profile", type=Path, default=Path("sdk/data/demo_profile.json"))
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = {"label": args.label, **measure(args.profile, args.draft_len, args.reps)}
    print(json.dumps(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"guard_check_cost_{args.label}.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
