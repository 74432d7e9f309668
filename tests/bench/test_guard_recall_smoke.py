"""bench.guard_recall on a small fixture: every category is generated, scored end to end through
`plan_uplink` with the real Specialist tokenizer, and the guard catches each span while leaving
ordinary commit sentences (tests/fixtures/guard_ordinary.txt, from the dev data) untouched."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from bench.guard_cases import CATEGORIES, people, positives
from bench.guard_recall import guards, measure, render

COST = ("hold on", "hold off")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "guard_ordinary.txt"


def test_guard_recall_smoke(smol_tok) -> None:
    rng = random.Random(0)
    persons = people(rng, 2)
    histories = [["Move the retry helper into its own module."], ["Small wording fixes in the docs."]]
    samples = positives(rng, persons, 2)
    negatives = FIXTURE.read_text().splitlines()
    gs = guards(persons, histories, smol_tok, None)
    run = measure("guard", gs["guard"], smol_tok, samples, negatives, draft_len=4)
    assert set(run["recall"]) == set(CATEGORIES)
    missed = {c: r for c, r in run["recall"].items() if r["recall"] < 1}
    assert missed == {}, run["missed_examples"]
    assert run["false_positives"] == 0, run["false_positive_examples"]
    # Without the guard's detectors the same spans would go up: the scoring can see a leak.
    bare = measure("none", [replace(g, detectors=()) for g in gs["guard"]], smol_tok, samples[:5], [], draft_len=4)
    assert all(r["recall"] == 0 for r in bare["recall"].values())
    result = {
        "command": "test",
        "seed": 0,
        "draft_len": 4,
        "tokenizer": "smollm2-135m-instruct",
        "positives": len(samples),
        "negatives": len(negatives),
        "runs": [run],
        "round_trip_cost": {
            k: {"bodies": 0, "tokens": 0, "rounds": 0, "lookahead_tokens": 0} for k in ("hold on", "hold off")
        },
        "seconds": 0.0,
    }
    page = render(result)
    assert "| email: plain | 2 | 100.0 % |" in page and "on smollm2-135m-instruct token IDs" in page
