"""Names in every script (issue #49, finding 3): a one-word trailer name in another script is an
identity, and a name registered in Cyrillic, Chinese or Korean is found as it is written in Latin
letters (anyascii's romanization and the common spellings of it)."""

from __future__ import annotations

import pytest

from specsteer.privacy.canaries import CanaryDetector, identities_from_trailers
from specsteer.privacy.spans import NAME

TRAILERS = [
    "Reviewed-by: 王秀英 <wxy@ex.org>",
    "Signed-off-by: Дмитрий Соколов <ds@ex.org>",
    "Co-authored-by: 김서연 <ksy@ex.org>",
]


def test_a_one_word_name_in_another_script_is_registered() -> None:
    ids = identities_from_trailers(TRAILERS)
    assert ids["王秀英"] == NAME and ids["김서연"] == NAME
    # A one-word Latin name is a name too (issue #49, Build 1: "one-word names included") where
    # it is capitalized and no common word; a bot, a team or a word is not.
    assert identities_from_trailers(["Acked-by: Oluwaseun <o@ex.org>"])["Oluwaseun"] == NAME
    for word in ("Bot", "Dependabot", "Release", "CI", "Mark"):
        assert word not in identities_from_trailers([f"Acked-by: {word} <x@ex.org>"])


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Thanks to Dmitry Sokolov for the review", "Dmitry Sokolov"),
        ("Dmitriy Sokolov reviewed it", "Dmitriy Sokolov"),
        ("Wang Xiuying fixed the leak", "Wang Xiuying"),
        ("as Xiuying Wang said", "Xiuying Wang"),
        ("Kim Seo-yeon wrote the test", "Kim Seo-yeon"),
        ("王秀英 wrote the test", "王秀英"),
    ],
)
def test_a_registered_name_is_found_in_its_romanizations(text: str, name: str) -> None:
    found = CanaryDetector(identities_from_trailers(TRAILERS)).find(text)
    assert [text[s.start : s.end] for s in found if s.kind == NAME] == [name]


@pytest.mark.parametrize("text", ["the wang of a string", "We will fix the king", "Kim said so"])
def test_ordinary_words_are_not_names(text: str) -> None:
    assert CanaryDetector(identities_from_trailers(TRAILERS)).find(text) == []
