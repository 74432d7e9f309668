"""The detectors on the forms a leak takes when it is not written the usual way."""

from __future__ import annotations

import base64

import pytest

from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.pii import PiiDetector
from specsteer.privacy.spans import ADDRESS, CANARY, CARD, EMAIL, IBAN, NAME, PHONE

PII = PiiDetector()


def found(text: str) -> list[tuple[str, str]]:
    return [(text[s.start : s.end], s.kind) for s in PII.find(text)]


@pytest.mark.parametrize(
    ("span", "kind"),
    [
        ("jane dot doe at example dot com", EMAIL),
        ("jane.doe at example dot org", EMAIL),
        ("jdoe42 at example.net", EMAIL),
        ("jane.doe [at] example [dot] com", EMAIL),
        ("jane.doe(at)example.com", EMAIL),
        ("jane.doe {AT} example.com", EMAIL),
        ("jane.doe @ example.com", EMAIL),
        ("jane.doe%40example.com", EMAIL),
        ("jane.doe+git@example.com", EMAIL),
        ("06 12 34 56 78", PHONE),
        ("06.12.34.56.78", PHONE),
        ("+33 6 12 34 56 78", PHONE),
        ("+33 (0)6 12 34 56 78", PHONE),
        ("030/1234567", PHONE),
        ("0171/123 45 67", PHONE),
        ("07700 900123", PHONE),
        ("03-1234-5678", PHONE),
        ("1-415-555-0132", PHONE),
        ("612 34 56 78", PHONE),
        ("0043 1 5551234", PHONE),
        ("gb82 west 1234 5698 7654 32", IBAN),
        ("de89370400440532013000", IBAN),
        ("4111 1111\n1111 1111", CARD),
        ("41111111\n11111111", CARD),
        ("221B Baker Street", ADDRESS),
        ("1600 Pennsylvania Avenue NW, Washington, DC 20500", ADDRESS),
        ("12 rue de la Paix, 75002 Paris", ADDRESS),
        ("Hauptstraße 5, 10115 Berlin", ADDRESS),
        ("Via Roma 10", ADDRESS),
        ("Flat 3, 62 Marrowgate Close", ADDRESS),
    ],
)
def test_written_forms_are_found(span: str, kind: str) -> None:
    text = f"Thanks to {span}, see the thread."
    assert found(text) == [(span, kind)]


@pytest.mark.parametrize(
    "text",
    [
        "look at github.com for the patch",
        "we fail at parse_options.c when",
        "after 5 minutes the drive was full",
        "the 3 way merge and 2 of the roads",
        "took 10 20 30 40 50 ms",
        "0000 0000 0000 0000",
        "on 05/01/2023 and 01.02.2023",
        "es13 is not an IBAN and neither is sha1 abcd1234",
        "an IBAN-shaped GB00 WEST 1234 5698 7654 32 that fails mod 97",
        "range 100-200, 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1",
    ],
)
def test_ordinary_text_stays_ordinary(text: str) -> None:
    assert found(text) == []


def test_an_iban_followed_by_a_word_is_cut_at_its_registered_length() -> None:
    text = "pay ES91 2100 0418 4502 0005 1332 before friday"
    assert found(text) == [("ES91 2100 0418 4502 0005 1332", IBAN)]


REGISTERED = {"Jane Q. Doe": NAME, "jane.doe@example.org": EMAIL, "my PIN is 482913": CANARY}


@pytest.mark.parametrize(
    ("text", "span", "kind"),
    [
        ("reviewed by Doe, Jane today", "Doe, Jane", NAME),
        ("reviewed by J. Doe today", "J. Doe", NAME),
        ("reviewed by Doe Jane today", "Doe Jane", NAME),
        ("Jane said so", "Jane", NAME),
        ("the PIN: 482913.", "482913", CANARY),
        ("the PIN: 4 8 2 9 1 3.", "4 8 2 9 1 3", CANARY),
        ("the PIN: 48-29-13.", "48-29-13", CANARY),
    ],
)
def test_registered_strings_in_other_spellings(text: str, span: str, kind: str) -> None:
    d = CanaryDetector(REGISTERED)
    assert [(text[s.start : s.end], s.kind) for s in d.find(text)] == [(span, kind)]


@pytest.mark.parametrize(
    "secret", [b"my PIN is 482913", b"482913", b"jane.doe@example.org", b"Jane Q. Doe", b"xx my PIN is 482913"]
)
def test_encodings_of_registered_strings_are_found_at_any_offset(secret: bytes) -> None:
    d = CanaryDetector(REGISTERED)
    for prefix in (b"", b"a", b"ab", b"abc"):
        data = prefix + secret + b" trailing"
        for encoded in (base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode(), data.hex().upper()):
            text = f"blob {encoded} end"
            spans = d.find(text)
            assert [text[s.start : s.end] for s in spans] == [encoded], (prefix, encoded)


def test_a_first_name_alone_needs_a_capital_and_no_use_as_a_word() -> None:
    d = CanaryDetector({"Jane Q. Doe": NAME, "Will Smith": NAME})
    assert d.find("jane said") == []  # lower case: a word
    assert d.find("Will it build?") == []  # "will" is a word
    common = CanaryDetector({"Grace Hopper": NAME}, common_words=["grace"])
    assert common.find("Grace period") == []  # the history uses it as a word
    shared = CanaryDetector({"Ada Lovelace": NAME, "Ada Byron": NAME})
    assert [s.kind for s in shared.find("Ada said")] == []  # two registered Adas: ambiguous


@pytest.mark.parametrize(
    ("text", "start_text"),
    [
        ("write to jane.doe", "jane.doe"),  # the local part, before its "@"
        ("write to JANE.DOE", "JANE.DOE"),
        ("write to jane dot d", "jane dot d"),
        ("write to jane.doe [a", "jane.doe [a"),
        ("write to jane.doe @ exa", "jane.doe @ exa"),
        ("write to jane dot doe at example dot", "jane dot doe at example dot"),
    ],
)
def test_an_address_is_held_from_its_local_part(text: str, start_text: str) -> None:
    h = PII.hazard(text)
    assert h is not None and h.kind == EMAIL and text[h.start :] == start_text


def test_a_secrets_first_digits_are_held_even_spaced_out() -> None:
    d = CanaryDetector(REGISTERED)
    for text, start_text in (("pin 4", "4"), ("pin 4 8", "4 8"), ("pin 48-2", "48-2")):
        h = d.hazard(text)
        assert h is not None and text[h.start :] == start_text
    assert d.hazard("pin 49") is None
