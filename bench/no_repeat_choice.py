"""Choose the device's repetition stop n from the dev authors' own writing (issue 51).

The stop (`DecodeOptions.no_repeat_ngram`, `core.repetition`) rules out every token that would
repeat an n-gram of the text generated so far. An author repeats short n-grams on purpose (a
list's "\\n  - ", an identifier said twice), so a small n would bend their real texts; a large n
lets a loop run longer before it is stopped. The rule, stated before looking at any generation:
the smallest n under which the stop would have ruled out at most `--budget` (0.5 %) of the tokens
of the authors' own texts, each cut to the generated length scale (`--cut` tokens), on the device
part of the dev authors' histories (`bench.style_split`: what a device holds). The tokens are the
Specialist's (its tokenizer only; no weights load).

    python -m bench.no_repeat_choice --data ../shared/data/commit-bodies-dev.jsonl \
        --out docs/results/no_repeat_choice.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.dataset import first_users
from bench.style_split import split_history
from specsteer.core.models import DEFAULT_SPECIALIST
from specsteer.core.repetition import repeating_tokens

LENGTHS = range(2, 13)


def stopped_share(texts: Sequence[Sequence[int]], n: int) -> float:
    """The share of the tokens of `texts` that the stop at n would have ruled out (each token
    against the text before it)."""
    stopped = sum(int(t[i] in repeating_tokens(t[:i], n)) for t in texts for i in range(n, len(t)))
    return stopped / max(1, sum(len(t) for t in texts))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.no_repeat_choice", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="dev dataset JSONL, one author a line")
    p.add_argument("--users", type=int, default=8, help="authors (the first of the data file)")
    p.add_argument("--cut", type=int, default=128, help="tokens of each text (the generated length scale)")
    p.add_argument("--budget", type=float, default=0.005, help="largest share of the authors' tokens ruled out")
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--out", type=Path, default=None, help="write the table and the choice here (JSON)")
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"bench.no_repeat_choice: error: there is no data file at {args.data}", file=sys.stderr)
        return 1
    from specsteer.core.device_lm import load_device_lm

    tokenizer = load_device_lm(args.specialist, progress=False).tokenizer
    users = first_users(args.data, args.users)
    texts = [
        tokenizer.encode(e["body"], add_special_tokens=False)[: args.cut] for u in users for e in split_history(u)[0]
    ]
    shares = {n: stopped_share(texts, n) for n in LENGTHS}
    chosen = next((n for n, share in shares.items() if share <= args.budget), None)
    result = {
        "command": "python -m bench.no_repeat_choice " + " ".join(argv if argv is not None else sys.argv[1:]),
        "users": [u["user_id"] for u in users],
        "texts": len(texts),
        "tokens": sum(len(t) for t in texts),
        "cut": args.cut,
        "budget": args.budget,
        "stopped_share": shares,
        "chosen": chosen,
    }
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
