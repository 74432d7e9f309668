"""Ordinary text the format recognizers would hold, line by line, without tokenizing or drafting.

    python -m bench.guard_ordinary_lines [--data /work/shared/data/commit-bodies-dev.jsonl] [--out FILE]

Every line of the dev data's subjects, bodies and targets (without lines carrying an "@" or a
"Key:" trailer: those are personal data, not ordinary text), plus the developer text of
`bench.guard_cases_adversarial` and `bench.guard_cases_identifiers` (40 per kind, seed 0), through
the recognizers of `privacy.recognizers` (keyword values, national identifiers, phones, shapes)
and the special categories (`privacy.special`):
how many lines hold a span at all, and which spans. A quick screen for a new recognizer's false
holds (seconds, where `bench.guard_recall` drafts every sentence through `plan_uplink`); run it
with two source trees on PYTHONPATH to compare them.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

from bench.guard_cases_adversarial import developer_text as adversarial_developer_text
from bench.guard_cases_identifiers import developer_text as identifier_developer_text
from specsteer.privacy.profile_format import read_users
from specsteer.privacy.recognizers import KeywordValueRecognizer, NationalIdRecognizer, PhoneRecognizer, ShapeRecognizer
from specsteer.privacy.special import SpecialCategoryRecognizer

DEFAULT_DATA = Path("/work/shared/data/commit-bodies-dev.jsonl")


def ordinary_lines(data: Path) -> list[str]:
    lines: list[str] = []
    for user in read_users(data, what="the data file"):
        for entry in [*user.stored_entries, *user.queries]:
            for key in ("subject", "body", "target"):
                value = entry.get(key)
                if isinstance(value, str):
                    lines += [s for s in value.split("\n") if s.strip() and "@" not in s and ":" not in s[:30]]
    lines += [t for t, _ in adversarial_developer_text(random.Random(0), 40)]
    lines += [t for t, _ in identifier_developer_text(random.Random(0), 40)]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guard_ordinary_lines")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    detectors = [
        KeywordValueRecognizer(),
        NationalIdRecognizer(),
        PhoneRecognizer(),
        ShapeRecognizer(),
        SpecialCategoryRecognizer(),
    ]
    lines = ordinary_lines(args.data)
    held: list[str] = []
    for line in lines:
        spans = [s for d in detectors for s in d.find(line)]
        if spans:
            held.append(line[spans[0].start : spans[0].end])
    result = {"lines": len(lines), "with_a_span": len(held), "spans": sorted(set(held))}
    print(json.dumps(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
