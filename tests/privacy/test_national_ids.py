"""National identifiers by python-stdnum's validators (issue #49, finding 4): a Swedish
personnummer, a Polish PESEL after its name, a Finnish HETU, a Korean RRN and the other personal
identifiers stdnum checks, found with their checksums; the same shapes with a wrong check digit,
build stamps and timestamps are not."""

from __future__ import annotations

import pytest

from specsteer.privacy.recognizers import KeywordValueRecognizer, NationalIdRecognizer, PhoneRecognizer, ShapeRecognizer
from specsteer.privacy.spans import NATIONAL_ID, PHONE

DETECTORS = (KeywordValueRecognizer(), ShapeRecognizer(), NationalIdRecognizer())

FOUND = [
    ("Her personnummer is 811218-9876, in the file.", "811218-9876"),
    ("Sv: 811218-9876 här", "811218-9876"),
    ("PESEL 44051401359 dla formularza", "44051401359"),
    ("hetu 131052-308T on the form", "131052-308T"),
    ("the id 131052-308T was entered", "131052-308T"),
    ("RRN 971013-9019902 for the bank", "971013-9019902"),
    ("주민등록번호 971013-9019902", "971013-9019902"),
    ("CPR 070761-4285 on file", "070761-4285"),
    ("kennitala 120174-3399 here", "120174-3399"),
    ("TC kimlik no 10000000146 for travel", "10000000146"),
    ("CNP 1800101221144 on the card", "1800101221144"),
]
CLEAN = [
    "the build 20231201-1234 ran",
    "commit 1701234567 at noon",
    "Her personnummer is 811218-9875.",  # a wrong check digit
    "PESEL 44051401358 dla",  # a wrong check digit
    "version 131052-308 of the tool",
    "bump 971013-901990 entries",
]


def found(text: str) -> list[str]:
    return sorted({text[s.start : s.end] for d in DETECTORS for s in d.find(text) if s.kind == NATIONAL_ID})


@pytest.mark.parametrize(("text", "value"), FOUND)
def test_a_valid_personal_identifier_is_found(text: str, value: str) -> None:
    assert found(text) == [value]


@pytest.mark.parametrize("text", CLEAN)
def test_a_wrong_check_digit_or_a_build_stamp_is_not(text: str) -> None:
    assert found(text) == []


def test_the_value_after_its_name_is_held_from_its_first_digit() -> None:
    held = [d.hazard("PESEL 4405") for d in DETECTORS]
    assert any(h is not None and h.start <= len("PESEL ") for h in held)


PHONES = [
    ("call me on 98765 43210 tonight", "98765 43210"),
    ("ring (11) 91234-5678 today", "(11) 91234-5678"),
    ("London office 020 7946 0958 after six", "020 7946 0958"),
    ("tel 06 12 34 56 78 le soir", "06 12 34 56 78"),
    (
        "my number is nine eight seven six five four three two one zero",
        "nine eight seven six five four three two one zero",
    ),
]
NOT_PHONES = [
    "build 2023-12-01 10 passed",
    "ports 8080 9090 3000 open",
    "took 12345 ms over 20 runs",
    "see #12345 67890",
    "keys 1 2 3 4 5 6 7 8 9 0 in a row",  # the dev data's one spaced digit row
    "24701\t31384 rows",  # table columns
]


@pytest.mark.parametrize(("text", "value"), PHONES)
def test_a_phone_in_a_national_format_or_spelled_out_is_found(text: str, value: str) -> None:
    """#49 finding 4: no country code, libphonenumber's validity in a strict region decides."""
    spans = [s for s in PhoneRecognizer().find(text) if s.kind == PHONE]
    assert [text[s.start : s.end] for s in spans] == [value]


@pytest.mark.parametrize("text", NOT_PHONES)
def test_dates_ports_and_counts_are_not_phones(text: str) -> None:
    assert PhoneRecognizer().find(text) == []


def test_an_area_code_in_parentheses_holds_from_its_first_digits() -> None:
    held = PhoneRecognizer().hazard("ring (11) 9123")
    assert held is not None and held.start == len("ring ")
