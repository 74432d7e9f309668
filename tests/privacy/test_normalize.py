"""One normal form for every detector: full-width forms, homoglyphs, zero-width characters, case."""

from __future__ import annotations

import pytest

from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.normalize import fold, fold_string
from specsteer.privacy.pii import PiiDetector
from specsteer.privacy.spans import EMAIL, NAME, PHONE


@pytest.mark.parametrize(
    ("raw", "folded"),
    [
        ("ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ", "jane@example.com"),  # full width
        ("jаne.dое@ехаmрlе.соm", "jane.doe@example.com"),  # Cyrillic look-alikes
        ("ja\u200bne\u00ad.doe", "jane.doe"),  # zero-width space, soft hyphen
        ("José ＪＡＮＥ", "jose jane"),  # accents, case
        ("０６ １２\u00a0３４", "06 12 34"),  # full-width digits, no-break space
        ("Straße", "strasse"),
        ("a\u2013b\u2014c", "a-b-c"),  # dashes
    ],
)
def test_fold(raw: str, folded: str) -> None:
    assert fold_string(raw) == folded


def test_folded_ranges_map_back_to_the_raw_text() -> None:
    raw = "x ｊａ\u200bｎｅ y"
    f = fold(raw)
    assert f.text == "x jane y"
    a = f.text.index("jane")
    start, end = f.span(a, a + 4)
    assert raw[start:end] == "ｊａ\u200bｎｅ"


@pytest.mark.parametrize(
    ("text", "kind", "span"),
    [
        ("mail ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ now", EMAIL, "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ"),
        ("mail jаne.dое@ехаmрlе.соm now", EMAIL, "jаne.dое@ехаmрlе.соm"),
        ("mail jane\u200b.doe@exa\u200bmple.com now", EMAIL, "jane\u200b.doe@exa\u200bmple.com"),
        ("call ０６ １２ ３４ ５６ ７８ now", PHONE, "０６ １２ ３４ ５６ ７８"),
    ],
)
def test_every_pattern_matches_the_folded_text(text: str, kind: str, span: str) -> None:
    found = PiiDetector().find(text)
    assert [(text[s.start : s.end], s.kind) for s in found] == [(span, kind)]


def test_registered_strings_match_through_homoglyphs_and_full_width() -> None:
    d = CanaryDetector({"Jane Doe": NAME}, variants=False)
    for text in ("by Jаne Dое today", "by ＪＡＮＥ ＤＯＥ today", "by Ja\u200bne Doe today"):
        assert [s.kind for s in d.find(text)] == [NAME], text
