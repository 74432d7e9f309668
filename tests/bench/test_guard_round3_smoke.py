"""bench.guard_recall's round-3 section (issue #49, Build 7) on a small draw: every category of
`bench.guard_cases_round3` is generated with values the libraries accept, scored end to end through
`plan_uplink` with a real tokenizer against guards built from the personas' histories, and held;
the developer text goes up untouched; the page renders the section."""

from __future__ import annotations

import random

from stdnum.be import nn
from stdnum.fi import hetu
from stdnum.pl import pesel

from bench import guard_cases_round3 as round3
from bench.guard_cases import Sample
from bench.guard_recall import measure, measure_developer_text, render, round3_guards


def test_round3_section_smoke(smol_tok) -> None:
    rng = random.Random(3)
    personas = round3.personas(rng, 2)
    cases = round3.positives(rng, personas, 1)
    assert {c for c, *_ in cases} == set(round3.CATEGORIES)
    samples = [Sample(c, t, sp, i) for c, t, sp, i in cases]
    gs = round3_guards(personas, [["Move the retry helper into its own module."]] * 2, smol_tok)
    run = measure("guard", gs, smol_tok, samples, [], draft_len=4)
    missed = {c: r for c, r in run["recall"].items() if r["recall"] < 1}
    assert missed == {}, run["missed_examples"]
    dev = measure_developer_text("guard", gs, smol_tok, round3.developer_text(rng, 1), draft_len=4)
    assert dev["false_positives"] == 0, dev["examples"]
    # The national identifiers are ones python-stdnum accepts.
    ids = [round3._one_id(random.Random(k)) for k in range(40)]
    modules = {"PESEL": pesel, "henkilötunnus": hetu, "rijksregisternummer": nn}
    assert all(modules[name].is_valid(x) for x, name, _ in ids if name in modules)
    section = {
        "seed": 3,
        "positives": len(samples),
        "developer_sentences": dev["sentences"],
        "runs": [run],
        "developer_text": [dev],
    }
    page = render({"command": "test", "round3": section, "seconds": 0.0})
    assert "## Round 3" in page and "| licence plate | 1 | 100.0 % |" in page
