"""Special-category data (GDPR Art. 9; issue #49, finding 2): health, sexual life, religion,
political opinion, ethnicity and union membership are held by the shipped vocabulary.

Each sensitive text is drafted a few tokens a round through `plan_uplink` as the device calls it
(SmolLM2's real tokenizer, a cloud that accepts every draft): no character of the span may go up,
not even the first letters of a medication ("Met" of "Metformin"). The prompt guard redacts them
by default; ordinary developer text with "health", "checks" or "religion" in code goes up whole.
"""

from __future__ import annotations

import pytest

from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.spans import SPECIAL_CATEGORY
from specsteer.privacy.special import SpecialCategoryRecognizer, vocabulary
from specsteer.sdk.prompt_guard import guard_prompt
from tests.privacy.test_guard_attack_forms import held, leaked

SENSITIVE = [
    ("Quick note for the record: the patient is HIV positive and stable.", "HIV positive"),
    ("She is 9 weeks pregnant, so no travel this quarter.", "9 weeks pregnant"),
    ("He has type 1 diabetes and carries snacks.", "type 1 diabetes"),
    ("Reminder: he takes Metformin with breakfast.", "Metformin"),
    ("She is on sertraline since the spring.", "sertraline"),
    ("My colleague was diagnosed with celiac disease last year.", "celiac disease"),
    ("Note that Sam is a devout Muslim and fasts in June.", "Muslim"),
    ("He came out as gay to the team last week.", "came out as gay"),
    ("She is a union member and a shop steward.", "union member"),
]

ORDINARY = [
    "Add a health check to the /healthz endpoint so the load balancer checks pass.",
    "Rename religion_id to faith_id in the users table and update the checks.",
    "The is_pregnant() flag moves to patient_state; see health_checks.py for the probe.",
    "Fix the stroke width of the cancel button and the type hints in checks.py.",
    "Document the health endpoint: it returns 200 when every check passes.",
]


@pytest.fixture(scope="module")
def guard(smol_tok) -> EgressGuard:
    return EgressGuard.for_profile([], smol_tok).for_prompt("Write the commit body.")


@pytest.mark.parametrize(("text", "span"), SENSITIVE)
def test_a_special_category_span_never_goes_up(guard, smol_tok, text: str, span: str) -> None:
    assert leaked(guard, smol_tok, text, span) == ""


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_developer_text_goes_up_whole(guard, smol_tok, text: str) -> None:
    assert held(guard, smol_tok, text) == ""
    assert SpecialCategoryRecognizer().find(text) == []


def test_the_prompt_guard_redacts_special_categories_by_default(guard) -> None:
    prompt = "Write a note to HR: I am 9 weeks pregnant and on sertraline, and I have type 1 diabetes."
    plan = guard_prompt(guard, prompt)
    for word in ("9 weeks", "pregnant", "sertraline", "diabetes"):
        assert word not in plan.public
    assert [kind for _, _, kind in plan.spans] == [SPECIAL_CATEGORY] * 3
    assert plan.restore(plan.public) == prompt
    assert plan.decisions() == [("prompt-redact", 3, "<SPECIAL>")]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("She was diagnosed with multiple sclerosis in 2019.", ["multiple sclerosis"]),
        ("He is HIV-positive.", ["HIV-positive"]),
        ("I voted for Brexit.", ["voted for Brexit"]),
        ("She is of Pakistani descent.", ["of Pakistani descent"]),
        ("he has cancer", ["cancer"]),
        ("cancer research funding", []),  # a cued term without its cue
        ("a conservative estimate of the gay-lussac constant", []),
        ("`pregnant` is a column name", []),
    ],
)
def test_what_the_recognizer_finds(text: str, found: list[str]) -> None:
    assert [text[s.start : s.end] for s in SpecialCategoryRecognizer().find(text)] == found


def test_a_word_that_could_begin_a_term_is_held_until_it_cannot() -> None:
    r = SpecialCategoryRecognizer()
    cases = [("he takes Met", "Met"), ("she is 9", "9"), ("she is 9 weeks preg", "9"), ("has type 1 d", "type")]
    for text, start in cases:
        h = r.hazard(text)
        assert h is not None and text[h.start :].startswith(start), text
    assert r.hazard("call health_chec") is None  # code
    assert r.hazard("the build") is None  # no term begins "build"
    assert SpecialCategoryRecognizer(hold_prefixes=False).hazard("he takes Met") is None  # the text has ended


def test_the_vocabulary_ships_with_the_package() -> None:
    v = vocabulary()
    assert len(v) > 300
    assert "metformin" in v.strong and "muslim" in v.cued_identity
