"""A user's technical vocabulary is not held (issue #49, finding 8): the README's first command
held `files_ref_store` and `packed_ref_store`, names of code the demo history repeats, and the
cloud's steering around the hole wrecked the text. A verbatim run of the history counts by the
user's own words in it, not by the codebase's names or the function words between them
(`privacy.ngrams.prose_words`); a secret, an identity or a copied sentence of prose in the same
place is still held.

Each text is drafted four tokens a round through `plan_uplink` as the device calls it (SmolLM2's
real tokenizer, a cloud that accepts every draft), with the guard `sdk generate` builds for the
demo profile and the README's prompt.
"""

from __future__ import annotations

import pytest

from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.ngrams import is_code_name, prose_words
from specsteer.sdk.context import Profile, demo_profile_path
from specsteer.sdk.uplink_guard import guard_for_profile
from tests.privacy.test_guard_attack_forms import held, leaked

README_PROMPT = "Write the commit body for: Inline mmapped_ref_iterator into packed_ref_iterator"

# What the Specialist drafts from the demo history (its names of code, in its phrasing), and a
# secret, an identity the history registers or PII in the same place.
CASES = [
    (
        "This splits the work between `files_ref_store` and `packed_ref_store`.",
        "This splits the work between `files_ref_store` and jane.roe@example.org.",
        "jane.roe@example.org",
    ),
    (
        "Inline `mmapped_ref_iterator` into `packed_ref_iterator`; the boundary between "
        "`files_ref_store` and `packed_ref_store` is unchanged.",
        "Inline `mmapped_ref_iterator` into `packed_ref_iterator`; the boundary between "
        "`files_ref_store` and Demo User's tree is unchanged.",
        "Demo User",
    ),
    (
        "Move the `lock` member to `files_ref_store`, and let `packed_ref_store` keep its own.",
        "Move the `lock` member to `files_ref_store`, and let ghp_R7mQ2xK9vLp4Tz8Wc3Nb6Yd1Hs5Jf0Ga2Ue keep its own.",
        "ghp_R7mQ2xK9vLp4Tz8Wc3Nb6Yd1Hs5Jf0Ga2Ue",
    ),
    # A name of code made of a registered person's name is that person's, not the codebase's.
    (
        "The boundary between `files_ref_store` and `packed_ref_store` is unchanged.",
        "The boundary between `files_ref_store` and `demo_user` is unchanged.",
        "demo_user",
    ),
]


@pytest.fixture(scope="module")
def guard(smol_tok) -> EgressGuard:
    profile = Profile.from_file(demo_profile_path())
    return guard_for_profile(profile, smol_tok, "placeholder").for_prompt(README_PROMPT)


@pytest.mark.parametrize(("code", "sensitive", "span"), CASES)
def test_names_of_code_go_up_whole_and_a_secret_in_their_place_does_not(
    guard, smol_tok, code: str, sensitive: str, span: str
) -> None:
    assert held(guard, smol_tok, code) == ""
    assert leaked(guard, smol_tok, sensitive, span) == ""


def test_a_copy_of_the_users_prose_is_held_from_the_users_words(guard, smol_tok) -> None:
    # The names go up; the history's own words after them ("is relatively narrow, move the
    # latter into a new module") are a passage, held as before.
    text = (
        "The boundary between `files_ref_store` and `packed_ref_store` is relatively narrow, "
        "move the latter into a new module, so it stays small."
    )
    h = held(guard, smol_tok, text)
    assert "narrow, move the latter" in h
    assert "files_ref_store" not in h and "packed_ref_store" not in h


def test_what_counts_as_a_name_of_code_and_as_the_users_words() -> None:
    for name in ("`files_ref_store`", "`packed_ref_store`.", "refIterator", "`strlen(prefix)`,", "a::b", "`trim`"):
        assert is_code_name(name), name
    # An address's parts, a name with an inner capital, and a word opening a quoted phrase are not.
    for word in ("jane.doe", "McDonald", "`git", "payroll"):
        assert not is_code_name(word), word
    assert prose_words("between `files_ref_store` and `packed_ref_store` is") == 0
    # Prose that names no code counts every word, function words too, as before.
    assert prose_words("it is in the box") == 5
