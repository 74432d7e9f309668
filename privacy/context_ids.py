"""Identifiers that only their context makes personal (issue #49, finding 4): licence plates after
a word that says a vehicle is meant, and a date of birth written next to a person's name.

* `LicencePlateRecognizer`: no well-kept library validates licence plates across countries (the
  formats are national and change; python-stdnum has none), so a plate is found by its general
  shape - one to three groups of capital letters and digits, five to eight of them, letters and
  digits both ("AB12 CDE", "M-AB 1234", "AB-123-CD", "1234 BCD", "WA 12345", "7ABC123") - within a
  few words after a cue ("plate", "reg", "Kennzeichen", "immatriculation", "matrícula", "targa",
  "car", "van", ...). Without a cue such a group is a ticket, a part number or a build tag.
* `BirthDateRecognizer`: a full date with a year old enough for a birth (twelve years or more
  ago) right after two or three capitalized words that are no common English words ("Aino
  Virtanen (02.06.1979)", "Jonas Berg, 13 May 1997"): a name with a date and no other word between
  is a record of a person; a release date follows a version, not a name ("Django 5.0 (2023-12-04)").

Each holds from the first character that could begin its span once the context is there (a cue,
a name and a separator), so the device drafts on until the span is whole or gone.
"""

from __future__ import annotations

import datetime
import re

from specsteer.privacy.registered import common_english_words
from specsteer.privacy.spans import NATIONAL_ID, Detector, Span, merge_spans

__all__ = ["BirthDateRecognizer", "LicencePlateRecognizer"]

_PLATE_CUE = (
    r"(?i:(?<![\w-])(?:(?:number|licen[cs]e|registration|reg\.?)[ \t]+)?plates?|reg\.?|registration|"
    r"kennzeichen|immatriculation|matr[ií]cula|targa|tablica|rejestracja|kenteken|car|van|truck|lorry|"
    r"vehicle|motorbike|motorcycle|scooter|camper)"
)
# Up to two short words between the cue and the plate ("car is", "van with plate", "car, reg").
_BETWEEN = r"(?:[ \t]*[,:(]?[ \t]*(?:is|was|with|number|no\.?|nr\.?|#)?)?[ \t]*[(\"']?[ \t]*"
_PLATE = r"[A-Z0-9ÄÖÜ]{1,8}(?:[ -][A-Z0-9ÄÖÜ]{1,5}){0,2}"
_PLATE_RE = re.compile(_PLATE_CUE + _BETWEEN + r"(?P<plate>" + _PLATE + r")(?![\w-])")
_PLATE_TAIL = re.compile(_PLATE_CUE + _BETWEEN + r"(?P<plate>[A-Z0-9ÄÖÜ][A-Z0-9ÄÖÜ -]{0,11})?\Z")


def _plate_ok(plate: str) -> bool:
    chars = re.sub(r"[ -]", "", plate)
    return 5 <= len(chars) <= 8 and any(c.isdigit() for c in chars) and any(c.isalpha() for c in chars)


class LicencePlateRecognizer(Detector):
    """Licence plates after a vehicle cue (see the module docstring)."""

    def find(self, text: str) -> list[Span]:
        out = []
        for m in _PLATE_RE.finditer(text):
            plate = m.group("plate")
            # The longest form that is a plate ("OY 727 AD", not "OY 727"); a trailing word of
            # the sentence ("KR 23390 is") is not part of it, being lower case.
            if _plate_ok(plate):
                out.append(Span(m.start("plate"), m.end("plate"), NATIONAL_ID))
        return merge_spans(out)

    def hazard(self, text: str) -> Span | None:
        m = _PLATE_TAIL.search(text[-80:])
        if m is None or m.group("plate") is None:
            return None
        plate = m.group("plate")
        chars = re.sub(r"[ -]", "", plate)
        if len(chars) > 8:
            return None
        start = len(text) - len(text[-80:]) + m.start("plate")
        return Span(start, len(text), NATIONAL_ID)


_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_DATE = (
    r"(?:\d{1,2}[./]\d{1,2}[./]" + _YEAR + r"|" + _YEAR.replace("year", "iso") + r"-\d{2}-\d{2}"
    r"|\d{1,2}(?:st|nd|rd|th)?[ \t]+(?i:"
    + _MONTH
    + r")[ \t]+"
    + _YEAR.replace("year", "word")
    + r"|(?i:"
    + _MONTH
    + r")[ \t]+\d{1,2},?[ \t]+"
    + _YEAR.replace("year", "us")
    + r")"
)
_NAME_WORD = r"[A-Z][a-z'’]+(?:-[A-Z][a-z]+)?"
_NAME_SEP = r"(?:[ \t]*[,(–—-][ \t]*|[ \t]+)"
# Two or three capitalized words, then a separator: the name a date of birth follows.
_NAME_LEAD = r"(?<![\w-])(?P<name>" + _NAME_WORD + r"(?:[ \t]+" + _NAME_WORD + r"){1,2})" + _NAME_SEP
_BIRTH_RE = re.compile(_NAME_LEAD + r"(?P<date>" + _DATE + r")(?![\w])")
_PARTIAL_DATE = (
    r"\d{1,4}(?:[./-]\d{0,2}(?:[./-]\d{0,4})?)?(?:(?:st|nd|rd|th)?[ \t]+[A-Za-z]{0,9}\.?(?:[ \t]+\d{0,4})?)?"
    r"|[A-Z][a-z]{0,8}\.?(?:[ \t]+\d{0,2},?(?:[ \t]+\d{0,4})?)?"
)
_BIRTH_TAIL = re.compile(_NAME_LEAD + r"(?P<date>" + _PARTIAL_DATE + r")\Z")
_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december",
)  # fmt: skip
_MONTH_WORDS = re.compile(r"(?i)" + _MONTH + r"\Z")


def _a_name(name: str) -> bool:
    """Two or three capitalized words of three letters or more, none a common English word, a
    month or a weekday ("On Fri, 18 Nov 2005, ... wrote:" is a mail's quote line)."""
    words = re.split(r"[ \t]+", name)
    common = common_english_words()
    return all(
        w.lower().rstrip("'’") not in common
        and not _MONTH_WORDS.match(w)
        and len(w) >= 3
        and not re.fullmatch(r"(?i)(?:mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)(?:day|nesday|sday|urday)?", w)
        for w in words
    )


class BirthDateRecognizer(Detector):
    """A date of birth beside a person's name (see the module docstring)."""

    def __init__(self, *, today: datetime.date | None = None) -> None:
        self.latest_birth_year = (today or datetime.date.today()).year - 12

    def find(self, text: str) -> list[Span]:
        out = []
        for m in _BIRTH_RE.finditer(text):
            year = next(int(y) for y in m.group("year", "iso", "word", "us") if y)
            if 1900 <= year <= self.latest_birth_year and _a_name(_last_words(m.group("name"))):
                out.append(Span(m.start("date"), m.end("date"), NATIONAL_ID))
        return merge_spans(out)

    def hazard(self, text: str) -> Span | None:
        tail = text[-60:]
        m = _BIRTH_TAIL.search(tail)
        if m is None or not _a_name(_last_words(m.group("name"))):
            return None
        date = m.group("date")
        # A written month must be one ("Mira Holt, Oslo" is a place); digits may still be a date.
        word = re.search(r"[A-Za-z]+", date)
        if word and not any(month.startswith(word.group().lower()) for month in _MONTH_NAMES):
            return None
        year = re.search(r"(?:19|20)\d{2}\Z", date)
        if year and int(year.group()) > self.latest_birth_year:
            return None
        return Span(len(text) - len(tail) + m.start("date"), len(text), NATIONAL_ID)


def _last_words(name: str) -> str:
    # A sentence's first word before a name ("Passenger: Emil Haddad") is matched as part of it
    # only when capitalized; the last two words are the name that is judged.
    return " ".join(re.split(r"[ \t]+", name)[-2:])
