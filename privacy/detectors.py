"""The egress guard: finds sensitive spans in a draft before it leaves the device.

Pure: no I/O, no network, no logging of the text it sees. Every detector matches the folded text
(`privacy.normalize.fold`: full-width forms, homoglyphs, zero-width characters and case hide
nothing) and maps its spans back to the raw characters. Three detectors, one guard:

* `PiiDetector` - personal-data patterns (emails, also written out; phone numbers in national and
  international formats; payment cards with a Luhn check; IPv4/IPv6 addresses; URLs carrying
  credentials; IBANs with the country length and mod-97 check; street addresses).
* `VerbatimNgramDetector` - runs of `n` or more Specialist tokens (default 8) that occur in the
  user's private history and not in the public prompt, and copy a passage (three words or more, or
  `2 n` tokens of anything): not a date, a number or one identifier that ordinary text repeats. The
  history's n-gram hashes are kept in a sorted array, so indexing 300 profile entries is one
  batched tokenizer call and some numpy.
* `CanaryDetector` - registered strings: planted canaries, and the user's own identities (names
  and emails from commit trailers, which the dataset's profiles carry), with the forms they take
  on the way out (`privacy.registered`: name variants, a canary's bare secret, hex and base64).

`EgressGuard.inspect(committed_text, draft_text)` returns the sensitive spans that touch the draft,
including spans that begin in already-committed text and continue into the draft.
`EgressGuard.check(committed_ids, new_ids, tokenizer)` returns a `GuardVerdict` saying where to
cut the tokens about to go up, and what to put in their place.

Why "holds" exist. A span that is only *complete* in the next round would otherwise leak its
prefix now: "john.doe@example.c" goes up in round i (not yet an email: one-letter TLD), the final
"om" is blocked in round i+1, and the cloud already has the address. So every detector also
reports a *hazard*: the earliest offset from which the end of the text could still grow into a
span ("jane.doe" before its "@", "...@exam", "+1 415 55", "4111 1111", a prefix of a registered
name, the first digits of a canary's secret). A hazard cuts the
draft like a span does, and sets `hold` so the device drafts a few tokens further locally (no
round trip) until the hazard turns into a span or dissolves. A device that cannot look further
(end of text, budget, look-ahead cap) treats the hold as a span: fail closed.

The device acts on verdicts in `sdk/uplink_guard.py` (`plan_uplink`): it checks the pending
recovery plus the fresh draft, drafts further locally while a verdict holds, sends the draft only
up to a cut, and at a span at the front applies the deployment's `Policy`: the cloud commits
`placeholder_ids(kind)` (`Round.literal_ids`) while the device's text keeps the real span, or the
device finishes alone (keep-local). Every decision is logged (kind, count, placeholder), never the span.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from core.session_types import GuardDecision
from privacy.normalize import fold
from privacy.registered import encodings, name_variants, secret_cores, unambiguous_first_names

__all__ = [
    "ADDRESS",
    "CANARY",
    "CARD",
    "EMAIL",
    "IBAN",
    "IP",
    "NAME",
    "PHONE",
    "PLACEHOLDERS",
    "PRIVATE_NGRAM",
    "URL_CREDENTIALS",
    "CanaryDetector",
    "Detector",
    "EgressGuard",
    "GuardVerdict",
    "PiiDetector",
    "Policy",
    "Span",
    "Tokenizer",
    "VerbatimNgramDetector",
    "identities_from_trailers",
    "kind_of_placeholder",
    "luhn_ok",
    "run_words",
    "token_offsets",
]

EMAIL = "email"
PHONE = "phone"
CARD = "card"
IP = "ip"
URL_CREDENTIALS = "url-credentials"
IBAN = "iban"
PRIVATE_NGRAM = "private-ngram"
CANARY = "canary"
NAME = "name"
ADDRESS = "address"

# One label per kind, so an audit record's placeholder names the kind without a separate field.
# Every label fits audit.records' placeholder grammar ([A-Za-z0-9_[]<>{}:-]{1,32}).
PLACEHOLDERS: Mapping[str, str] = {
    EMAIL: "<EMAIL>",
    PHONE: "<PHONE>",
    CARD: "<CARD>",
    IP: "<IP>",
    URL_CREDENTIALS: "<URL>",
    IBAN: "<IBAN>",
    PRIVATE_NGRAM: "<PRIVATE>",
    CANARY: "<SECRET>",
    NAME: "<NAME>",
    ADDRESS: "<ADDRESS>",
}

# When spans of different kinds overlap, the merged span is named after the most specific kind.
_PRIORITY = (CANARY, CARD, IBAN, URL_CREDENTIALS, EMAIL, PHONE, IP, ADDRESS, NAME, PRIVATE_NGRAM)


def kind_of_placeholder(label: str) -> str | None:
    """The kind a placeholder label stands for (`"<EMAIL>"` -> `"email"`), or None."""
    for kind, text in PLACEHOLDERS.items():
        if text == label:
            return kind
    return None


@dataclass(frozen=True, order=True)
class Span:
    """A sensitive span `[start, end)` in characters of the inspected text."""

    start: int
    end: int
    kind: str

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"a span needs 0 <= start <= end; got [{self.start}, {self.end})")


class Tokenizer(Protocol):
    """The slice of a Hugging Face fast tokenizer the guard uses (the Specialist's tokenizer)."""

    def __call__(self, text: Any, *, add_special_tokens: bool = ..., return_offsets_mapping: bool = ...) -> Any: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ..., **kwargs: Any) -> Any:
        """Text of `token_ids`; the guard decodes the way `sdk.device.Specialist.decode` does.

        Typed as transformers types it (`str | list[str]`, a list only for a batch), loosely, so a
        Hugging Face tokenizer satisfies the protocol; the guard decodes one flat list, a `str`.
        """
        ...


class Detector:
    """Base class: `find` complete spans; `hazard` the start of a possible span at the text's end."""

    def find(self, text: str) -> list[Span]:
        raise NotImplementedError

    def hazard(self, text: str) -> Span | None:
        """The earliest span `[start, len(text))` that more text could turn into a complete match."""
        return None

    def for_prompt(self, prompt: str) -> Detector:
        """This detector for one session with `prompt` as the public prompt (default: unchanged)."""
        return self


# ----------------------------------------------------------------------------------------------
# Personal-data patterns (all matched on `privacy.normalize.fold(text).text`: NFKC, confusables
# folded, lower case; spans map back to the raw text)
# ----------------------------------------------------------------------------------------------

# File extensions that follow an '@' in build artifacts and retina images ("gcc@13--13.2.0.bottle.tar.gz",
# "icon@2x.png"). None is an IANA top-level domain, so skipping them loses no real address.
_EXTENSIONS = (
    "gz tgz bz2 xz zst lz tar txt log json yaml yml toml cfg ini png jpg jpeg gif svg webp bmp ico patch "
    "diff orig rej lock bak tmp swp exe dll dylib cc cpp cxx hpp hh pyc obj"
)
_NOT_TLDS = frozenset(_EXTENSIONS.split())


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Top-level domains an address written out in words ("jane at example dot com") ends with: the
# generic ones in common use, the reserved ones of RFC 2606/6761, and any two-letter country code.
_WORD_TLDS = _words(
    "com org net edu gov mil int info biz name pro mobi app dev io ai me co tv xyz online site tech email "
    "cloud page blog shop store live world today space website club invalid test example local localhost "
    "internal arpa"
)

_L = r"[a-z0-9_%+-]"  # a character of an address's local part or a label, besides the dot
_DOT = r"(?:\s*[\[\(\{<]\s*dot\s*[\]\)\}>]\s*|\s+dot\s+|\.)"
_AT = r"(?P<at>\s*[\[\(\{<]\s*at\s*[\]\)\}>]\s*|\s+at\s+|\s*(?:@|%40|&#0*64;|&commat;)\s*)"
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
# An address in any of its written forms: "jane.doe@example.com", "jane dot doe at example dot com",
# "jane.doe [at] example [dot] com", "jane.doe (at) example.com", "jane.doe @ example.com", "%40".
_EMAIL_RE = re.compile(
    rf"(?<![a-z0-9._%+-])(?P<local>{_L}{{1,64}}(?:{_DOT}{_L}{{1,64}}){{0,8}})"
    rf"{_AT}(?P<domain>(?:{_LABEL}{_DOT}){{1,6}}(?P<tld>[a-z]{{2,24}}))(?![a-z0-9-])"
)
_PLAIN_AT = re.compile(r"\s*@\s*")
_WORD_DOT = re.compile(r"\s+dot\s+|[\[\(\{<]\s*dot")

# Phone numbers: separators between digit groups are one of " . - /" (slashes after an area code,
# "030/1234567"); the area code may sit in parentheses; the country code is "+CC" or "00CC".
_PSEP = r"(?:[ .\-/]|\s?[/-]\s?)"
_PHONE_INTL_RE = re.compile(
    r"(?<![\w+.])(?:\+|\b00)[1-9]\d{0,2}(?:\s?\(0\))?(?:" + _PSEP + r"?\(?\d{1,5}\)?){1,7}(?!\d|[.\-/]\d)"
)
# National numbers with a trunk 0: "030 1234567", "06 12 34 56 78", "06.12.34.56.78", "0171/1234567",
# "020 7946 0958", "03-1234-5678", "(030) 1234567", "0612345678".
_PHONE_NATIONAL_RE = re.compile(
    r"(?<![\w.+\-/])(?:\(0\d{1,5}\)|0\d{1,5})(?:" + _PSEP + r"\d{2,8}){1,5}(?![\w\-/]|\.\d)"
    r"|(?<![\w.+\-/])0[1-9]\d{8,9}(?![\w\-/]|\.\d)"
)
# North American "(415) 555-0132", "415-555-0132", "1-415-555-0132", "415/555-0132"; dates never fit 3-3-4.
_PHONE_NANP_RE = re.compile(r"(?<![\w.+\-/])(?:1[ .\-])?(?:\(\d{3}\)[ ]?|\d{3}[-. /])\d{3}[-. ]\d{4}(?![\w\-/]|\.\d)")
# Spanish-style national mobiles without a trunk: "612 34 56 78".
_PHONE_GROUPED_RE = re.compile(r"(?<![\w.+\-/])[6-9]\d{2}(?: \d{2}){3}(?![\w\-/]|\.\d)")

# Card numbers: 13-19 digits, in groups separated by a space, a hyphen or a line break.
_CARD_RE = re.compile(r"(?<![\w.,-])\d(?:(?:[ \-]|[ ]*\n[ ]*)?\d){12,18}(?![\w-]|[.,]\d)")
_IPV4_RE = re.compile(
    r"(?<![\w.-])((?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))(?![\w-]|\.\d)"
)
# Version strings that happen to have four numeric parts ("Git 1.8.0.3", "version 2.39.2.1").
_VERSION_CONTEXT = re.compile(r"(?:\bgit|\bversion|\brelease|\bv|\bsection|§|\bc\d\d)\s*$")
_IPV6_RE = re.compile(r"(?<![\w:.])(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[a-z0-9]+)?(?![\w:])")
_URL_CREDENTIALS_RE = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{1,15}://"
    r"(?:[^\s/?#@:]+:[^\s/?#@]+|[a-z0-9_-]{20,})@[^\s/?#]+"
)
# IBANs in either case, grouped by fours or not: checked against the country's length and mod 97.
_IBAN_RE = re.compile(r"(?<![a-z0-9])[a-z]{2}\d{2}(?:[ \-]?[a-z0-9]{4}){2,7}(?:[ \-]?[a-z0-9]{1,3})?(?![a-z0-9])")
# ISO 13616 IBAN lengths by country (the SWIFT registry).
_IBAN_LENGTHS = {
    **dict.fromkeys(_words("NO"), 15),
    **dict.fromkeys(_words("BE"), 16),
    **dict.fromkeys(_words("DK FI FO GL NL SD"), 18),
    **dict.fromkeys(_words("MK SI"), 19),
    **dict.fromkeys(_words("AT BA EE KZ LT LU XK"), 20),
    **dict.fromkeys(_words("CH CR HR LI LV"), 21),
    **dict.fromkeys(_words("BG BH DE GB GE IE ME RS VA"), 22),
    **dict.fromkeys(_words("AE GI IL IQ OM TL"), 23),
    **dict.fromkeys(_words("AD CZ ES MD PK RO SA SE SK TN VG"), 24),
    **dict.fromkeys(_words("EG PT ST"), 25),
    **dict.fromkeys(_words("IS TR"), 26),
    **dict.fromkeys(_words("FR GR IT MC MR SM"), 27),
    **dict.fromkeys(_words("AL AZ BY CY DO GT HU LB PL SV"), 28),
    **dict.fromkeys(_words("BR PS QA UA"), 29),
    **dict.fromkeys(_words("JO KW MU"), 30),
    **dict.fromkeys(_words("MT SC"), 31),
    **dict.fromkeys(_words("LC"), 32),
    **dict.fromkeys(_words("RU"), 33),
}

# Street addresses: "221b baker street", "1600 pennsylvania avenue nw", "12 rue de la paix",
# "hauptstrasse 5" ("straße" folds to "strasse"), "via roma 10", "calle mayor 5, 28013 madrid".
_STREET_TYPES = (
    r"street|st\.?|avenue|ave\.?|road|rd\.?|boulevard|blvd\.?|lane|ln\.?|drive|dr\.?|court|ct\.?|place|pl\.?"
    r"|terrace|way|square|sq\.?|parkway|pkwy\.?|highway|hwy\.?|crescent|close|circle|cir\.?|trail|row|gardens"
    r"|grove|mews|alley|plaza"
)
_FUNCTION_WORDS = _words(
    "the a an of to in on at for and or but with this that these those is are was were be been it its "
    "by from as into than then so not no all any each every our your their his her my we you they "
    "more less most least same other another new old first last next after before about over under "
    "minutes seconds hours days times lines bytes files commits tests ways steps"
)
_POSTCODE = (
    r"(?:,?\s*(?:\d{4,5}|[a-z]{1,2}\d[a-z\d]?\s?\d[a-z]{2}|[a-z]{2}\s+\d{5}(?:-\d{4})?)"
    r"(?:\s+[a-z][a-z-]{2,})?)?"
)
_ADDRESS_EN = re.compile(
    r"(?<![\w.\-/])(?:(?:flat|apt\.?|apartment|suite|unit)\s*\d{1,4}[a-z]?,?\s+)?\d{1,5}[a-z]?,?\s+(?P<words>(?:[a-z][a-z'.-]*\s+){1,3})"
    rf"(?:{_STREET_TYPES})(?![\w])(?:\s+(?:n|s|e|w|ne|nw|se|sw)\b)?"
    rf"(?:,\s*[a-z][a-z-]{{2,}}(?:\s[a-z][a-z-]{{2,}})?{_POSTCODE[:-1]})?"  # a city only with its postcode
)
_ADDRESS_FR = re.compile(
    r"(?<![\w.\-/])\d{1,4}(?:\s?(?:bis|ter))?,?\s+(?:rue|avenue|boulevard|bd|place|chemin|allee|impasse|quai|cours)"
    r"\s+(?:(?:de|du|des|la|le|l'|d')\s*){0,2}[a-z][a-z'-]{2,}(?:-[a-z][a-z'-]+)*"
    r"(?:,?\s*\d{5}(?:\s+[a-z][a-z-]{2,})?)?"
)
_ADDRESS_DE = re.compile(
    r"(?<![\w.\-/])(?:[a-z][a-z-]{2,}\s(?=str(?:asse|\.)))?[a-z-]*(?:strasse|str\.|weg|platz|allee|gasse)\s+\d{1,4}[a-z]?"
    r"(?![\w.])"
    r"(?:,?\s*\d{4,5}(?:\s+[a-z][a-z-]{2,})?)?"
)
_ADDRESS_IBERIAN = re.compile(
    r"(?<![\w.\-/])(?:via|viale|piazza|corso|calle|avenida|plaza|rua|praca)\s+(?:(?:de|del|la|di|da|do)\s+){0,2}"
    r"[a-z][a-z'-]{2,}(?:\s+[a-z][a-z'-]{2,})?,?\s+\d{1,4}(?![\w.])(?:,?\s*\d{5}(?:\s+[a-z][a-z-]{2,})?)?"
)

# Hazards: the end of the text could still grow into one of the patterns above. An address's
# local part is held before its "@" arrives ("jane.doe" of "jane.doe@example.com"), as are the
# spelled-out forms ("jane dot doe at exa"): any run that a few more characters could turn into
# an address stays on the device until it dissolves or completes.
_HAZARD_TAIL = 128
_DOTP = r"(?:\s*[\[\(\{<]\s*(?:d(?:o(?:t\s*[\]\)\}>]?\s*)?)?)?|\s+(?:d(?:o(?:t\s*)?)?)?|\.)"  # a dot, as far as written
_ATP = r"(?:\s*[\[\(\{<]\s*(?:a(?:t\s*)?)?|\s+(?:a(?:t\s*)?)?|\s*@?|\s*%4?|\s*&(?:#\d*|c[a-z]*)?)"
_AT_FULL = _AT.replace("?P<at>", "?:")
_EMAIL_HAZARD = re.compile(
    rf"(?<![a-z0-9._%+-]){_L}+(?:{_DOT}{_L}+)*"
    rf"(?:{_DOTP}|{_ATP}|{_AT_FULL}(?:[a-z0-9-]+(?:{_DOT}[a-z0-9-]+)*{_DOTP}?)?)?\Z"
    r"|<[a-z0-9._%+-]*\Z"
)
_BARE_WORD = re.compile(rf"{_L}+\.?")
_DIGITS_HAZARD = re.compile(r"(?<![\w.,])(?:\+|\()?\d[\d .()/\n-]{0,24}\Z")
_IPV6_HAZARD = re.compile(r"(?<![\w:.])[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){1,7}\Z")
_URL_HAZARD = re.compile(r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{1,15}://[^\s/?#@]*\Z")
_IBAN_HAZARD = re.compile(r"(?<![a-z0-9])[a-z]{2}\d{1,2}(?:[ \-]?[a-z0-9]{0,4}){0,8}\Z")
_ADDRESS_GROWS = re.compile(r"(?:,?\s*[a-z0-9-]{0,20}){0,4},?\s?")  # ", springfield, il 6270"
_ADDRESS_HAZARD = re.compile(
    r"(?<![\w.\-/])\d{1,5}[a-z]?,?\s+(?:[a-z][a-z'.-]*\s*){0,4}\Z"
    r"|(?<![\w.\-/])(?:via|viale|piazza|corso|calle|avenida|plaza|rua|praca|flat|apt\.?|apartment|suite|unit)"
    r"(?:\s+[a-z0-9][a-z0-9'-]*,?){0,3}\s*\Z"
    r"|(?<![\w.\-/])[a-z-]*(?:strasse|str\.|weg|platz|allee|gasse)\s*\d{0,4}\Z"
)

# Issuer prefixes of the major card networks; a Luhn-valid number outside them is a counter or ID.
_CARD_PREFIX = re.compile(r"4|5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720|3[47]|3(?:0[0-5]|[68])|35|6011|64[4-9]|65|62")


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a string of decimal digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_ok(compact: str) -> bool:
    compact = compact.upper()
    if _IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _iban_length(raw: str) -> int:
    """The length of the valid IBAN `raw` starts with (0 if none): the pattern may run on into a
    following word ("es13 6428 ... 4064 before" ends with "befo" + "re")."""
    parts = re.split(r"([ \-])", raw)
    for j in range(len(parts), 0, -2):
        head = "".join(parts[:j])
        if _iban_ok(re.sub(r"[ \-]", "", head)):
            return len(head)
    return 0


def _card_ok(raw: str) -> bool:
    groups = re.split(r"[ ]*\n[ ]*|[ \-]", raw)
    digits = "".join(groups)
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits) or not luhn_ok(digits):
        return False
    if len(groups) == 1:
        return True
    # Typed or printed card numbers come in groups (4-4-4-4, Amex 4-6-5), possibly broken across
    # a line; "1 2 3 4 ..." or mixed spaces and hyphens are tables of numbers, not a card.
    if {" ", "-"} <= set(raw):
        return False
    return all(len(g) >= 3 for g in groups[:-1])


def _phone_ok(raw: str, *, lo: int, hi: int) -> bool:
    digits = [c for c in raw if c.isdigit()]
    if not lo <= len(digits) <= hi or raw.count("(") != raw.count(")"):
        return False
    # All zeros after the trunk or country code is padding ("0000 0000 0000"), not a line.
    return any(c != "0" for c in digits[1:]) and len(set(re.findall(r"[./]", raw))) <= 1


def _email_ok(m: re.Match[str]) -> bool:
    tld, at, local, domain = m.group("tld"), m.group("at"), m.group("local"), m.group("domain")
    if tld in _NOT_TLDS:
        return False
    if _PLAIN_AT.fullmatch(at) or "[" in at or "(" in at or "{" in at or "<" in at or "%" in at or "&" in at:
        return True
    # " at ": "look at github.com" is prose. Written-out addresses spell out a dot somewhere, or
    # have an address-like local part ("jane.doe", "jdoe42", "j_doe"), and end in a real TLD.
    if tld not in _WORD_TLDS and len(tld) != 2:
        return False
    return bool(_WORD_DOT.search(domain) or _WORD_DOT.search(local) or re.search(r"[._+\d]", local))


def _address_ok(m: re.Match[str]) -> bool:
    words = m.groupdict().get("words")
    return words is None or not any(w in _FUNCTION_WORDS for w in words.split())


class PiiDetector(Detector):
    """Personal-data patterns with validators that keep version numbers, dates and hashes out.

    Matching runs on the folded text (`privacy.normalize.fold`: full-width forms, homoglyphs,
    zero-width characters and case do not hide anything). Decisions on tricky inputs (tested in
    tests/privacy/test_detectors.py):

    * emails need a dotted domain with an alphabetic TLD of 2+ letters: `HEAD@{1}`, `a@b.c`
      (C macros), `user@localhost` are not emails; `git@github.com` and mailing-list Message-IDs
      (`<2024...@gmail.com>`) are, because they are address-shaped and often personal.
      Build artifacts (`gcc@13--13.2.0.bottle.tar.gz`, `icon@2x.png`) are not: their "TLD" is a file type.
      Written-out addresses ("jane dot doe at example dot com", "[at]", "(at)", " @ ", "%40") are
      emails; "look at github.com" is not (a spelled-out " at " needs a spelled-out dot or an
      address-like local part, and a real TLD).
    * phones need a `+`/`00` country code, the 3-3-4 North American shape, a national trunk `0`
      and 9-12 digits in groups of 2+ ("06 12 34 56 78", "030/1234567"), or the 3-2-2-2 shape
      of a Spanish mobile; plain digit runs (timestamps, counts), dates, times and versions never match.
    * cards need 13-19 digits, a known issuer prefix, the Luhn check and groups of 3+ digits
      (a line break may split them).
    * IBANs in either case need the country's registered length and the mod-97 check.
    * street addresses need a house number and a street type ("221b Baker Street", "12 rue de la
      Paix", "Hauptstraße 5", "Via Roma 10"); "after 5 minutes the drive" is prose.
    * IPv4 addresses exclude loopback/unspecified/broadcast, all-single-digit quads (C99 section
      "6.3.1.8", versions "1.8.0.3") and numbers right after "git", "version", "v", "section".
    * IPv6 addresses must parse, contain a decimal digit (C++ `a::b` does not) and not be loopback.
    * URL credentials: `scheme://user:password@host` or a token-like user of 20+ characters.
    """

    KINDS = (EMAIL, PHONE, CARD, IP, URL_CREDENTIALS, IBAN, ADDRESS)

    def __init__(self, kinds: Iterable[str] | None = None, *, hold_local_parts: bool = True) -> None:
        chosen = tuple(self.KINDS if kinds is None else kinds)
        unknown = sorted(set(chosen) - set(self.KINDS))
        if unknown:
            raise ValueError(f"unknown personal-data kind(s): {', '.join(unknown)}")
        self.kinds = frozenset(chosen)
        self.hold_local_parts = hold_local_parts

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        t = f.text
        out: list[tuple[int, int, str]] = []
        k = self.kinds
        if EMAIL in k:
            out += [(m.start(), m.end(), EMAIL) for m in _EMAIL_RE.finditer(t) if _email_ok(m)]
        if URL_CREDENTIALS in k:
            out += [(m.start(), m.end(), URL_CREDENTIALS) for m in _URL_CREDENTIALS_RE.finditer(t)]
        if PHONE in k:
            out += [
                (m.start(), m.end(), PHONE) for m in _PHONE_INTL_RE.finditer(t) if _phone_ok(m.group(), lo=8, hi=15)
            ]
            out += [(m.start(), m.end(), PHONE) for m in _PHONE_NANP_RE.finditer(t)]
            out += [
                (m.start(), m.end(), PHONE) for m in _PHONE_NATIONAL_RE.finditer(t) if _phone_ok(m.group(), lo=9, hi=12)
            ]
            out += [(m.start(), m.end(), PHONE) for m in _PHONE_GROUPED_RE.finditer(t)]
        if CARD in k:
            out += [(m.start(), m.end(), CARD) for m in _CARD_RE.finditer(t) if _card_ok(m.group())]
        if IP in k:
            out += [(m.start(1), m.end(1), IP) for m in _IPV4_RE.finditer(t) if _ipv4_ok(t, m)]
            out += [(m.start(), m.end(), IP) for m in _IPV6_RE.finditer(t) if _ipv6_ok(m.group())]
        if IBAN in k:
            out += [(m.start(), m.start() + n, IBAN) for m in _IBAN_RE.finditer(t) if (n := _iban_length(m.group()))]
        if ADDRESS in k:
            for pattern in (_ADDRESS_EN, _ADDRESS_FR, _ADDRESS_DE, _ADDRESS_IBERIAN):
                out += [(m.start(), m.end(), ADDRESS) for m in pattern.finditer(t) if _address_ok(m)]
        # "+1 (415) 555-0132" is also a North American "(415) 555-0132": one finding, not two.
        return _merge(Span(*f.span(a, b), kind) for a, b, kind in out if b > a)

    def hazard(self, text: str) -> Span | None:
        offset = max(0, len(text) - _HAZARD_TAIL)
        f = fold(text[offset:])
        tail = f.text
        found: list[Span] = []
        k = self.kinds

        def add(m: re.Match[str] | None, kind: str) -> None:
            if m:
                found.append(Span(offset + f.raw_start(m.start()), len(text), kind))

        if EMAIL in k:
            m = _EMAIL_HAZARD.search(tail)
            # Without local-part holds, a bare word ("loop", "patch.") is not held; "jane.doe",
            # "jane dot d" or anything with its "@" already written still is.
            if m and not self.hold_local_parts and _BARE_WORD.fullmatch(m.group()):
                m = None
            add(m, EMAIL)
        if URL_CREDENTIALS in k:
            add(_URL_HAZARD.search(tail), URL_CREDENTIALS)
        if k & {PHONE, CARD, IP}:
            m = _DIGITS_HAZARD.search(tail)
            # Three digits can still become a phone, card or address; "+" or "(" announce a phone.
            if m and (sum(c.isdigit() for c in m.group()) >= 3 or m.group()[0] in "+("):
                add(m, PHONE if PHONE in k else CARD if CARD in k else IP)
        if IP in k:
            m = _IPV6_HAZARD.search(tail)
            add(m if m and any(c.isdigit() for c in m.group()) else None, IP)
        if IBAN in k:
            add(_IBAN_HAZARD.search(tail), IBAN)
        if ADDRESS in k:
            m = _ADDRESS_HAZARD.search(tail)
            add(m if m and not any(w in _FUNCTION_WORDS for w in m.group().split()[1:]) else None, ADDRESS)
            # A complete street may still take its postcode and city (", 75002 Paris").
            for pattern in (_ADDRESS_EN, _ADDRESS_FR, _ADDRESS_DE, _ADDRESS_IBERIAN):
                for m in pattern.finditer(tail):
                    if _address_ok(m) and _ADDRESS_GROWS.fullmatch(tail, m.end()):
                        add(m, ADDRESS)
        return min(found, default=None)


def _ipv4_ok(text: str, m: re.Match[str]) -> bool:
    quad = m.group(1)
    octets = [int(x) for x in quad.split(".")]
    if all(o < 10 for o in octets):
        return False
    addr = ipaddress.IPv4Address(quad)
    if addr.is_loopback or addr.is_unspecified or quad == "255.255.255.255":
        return False
    return not _VERSION_CONTEXT.search(text[max(0, m.start(1) - 12) : m.start(1)])


def _ipv6_ok(raw: str) -> bool:
    addr_text = raw.split("%", 1)[0]
    if not any(c.isdigit() for c in addr_text) or ("::" not in addr_text and addr_text.count(":") != 7):
        return False
    try:
        addr = ipaddress.IPv6Address(addr_text)
    except ValueError:
        return False
    return not (addr.is_loopback or addr.is_unspecified)


# ----------------------------------------------------------------------------------------------
# Registered strings: canaries and the user's identities
# ----------------------------------------------------------------------------------------------

_TRAILER_RE = re.compile(r"^\s*[A-Za-z][A-Za-z-]*\s*:\s*(?P<name>[^<>]*?)\s*(?:<(?P<email>[^<>\s]+@[^<>\s]+)>)?\s*$")


def identities_from_trailers(trailers: Iterable[str]) -> dict[str, str]:
    """Names and emails in trailer lines such as `Signed-off-by: Name <email>`, as {string: kind}.

    Names shorter than two words are skipped: a single first name ("Jeff") is too common a word to
    redact everywhere, and the guard would then hold at every capitalized word.
    """
    out: dict[str, str] = {}
    for line in trailers:
        m = _TRAILER_RE.match(line)
        if not m:
            continue
        name, email = m.group("name").strip(), m.group("email")
        if email:
            out[email] = EMAIL
        if len(name.split()) >= 2 and "@" not in name:
            out[name] = NAME
    return out


def _normalize(text: str) -> str:
    return " ".join(fold(text).text.split())


_SEPARATOR = r"[\s.\-_/,:|]{0,2}"
_LOOSE_TAIL = re.compile(r"[a-z0-9](?:[\s.\-_/,:|]{0,2}[a-z0-9])*[\s.\-_/,:|]{0,2}")
_ENCODED_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789+/=_-"


class CanaryDetector(Detector):
    """Registered strings and the forms they take on the way out, matched on the folded text.

    * the string itself, in any case, with any whitespace between words;
    * a registered name's variants ("Doe, Jane", "J. Doe", "jane.doe"), and its first name alone
      where that is unambiguous (`privacy.registered.unambiguous_first_names`);
    * a canary's secret without its template phrase ("482913" of "my PIN is 482913"), also with
      separators between its characters ("4 8 2 9 1 3", "48-29-13");
    * the hex and base64 encodings of every registered string and secret; the whole encoded word
      around a match is the span.

    `min_prefix` is the shortest prefix (in characters, starting at a word) of a string or variant
    that makes the end of a text a hazard; a secret's prefix holds from its first character.
    `variants=False` matches the registered strings only (what a leakage report counts).
    """

    def __init__(
        self,
        strings: Mapping[str, str] | Iterable[str],
        *,
        min_prefix: int = 3,
        variants: bool = True,
        common_words: Iterable[str] = (),
    ) -> None:
        items = strings.items() if isinstance(strings, Mapping) else ((s, CANARY) for s in strings)
        raw: dict[str, str] = {}
        self.strings: dict[str, str] = {}
        for s, kind in items:
            if kind not in PLACEHOLDERS:
                raise ValueError(f"unknown kind {kind!r} for a registered string")
            if s.strip():
                raw[s.strip()] = kind
                self.strings[_normalize(s)] = kind
        exact = dict(self.strings)
        cores: set[str] = set()
        firsts: set[str] = set()
        encoded: dict[str, str] = {}
        if variants:
            names = [n for n, kind in self.strings.items() if kind == NAME]
            for n in names:
                for v in name_variants(n):
                    exact.setdefault(v, NAME)
            common = {w.lower() for w in common_words}
            firsts = {f for f in unambiguous_first_names(names) if f not in common}
            raw_cores = {c: CANARY for s, kind in raw.items() if kind == CANARY for c in secret_cores(s)}
            cores = {c for c in map(_normalize, raw_cores) if " " not in c}
            encoded = encodings({**raw, **raw_cores})
        self.exact = exact
        self.first_names = frozenset(firsts) if variants else frozenset()
        self._first_re = _alternation(self.first_names, _word_pattern)
        self.cores = frozenset(cores)
        self.encoded = encoded
        self.min_prefix = min_prefix
        self._exact_re = _alternation(exact, _word_pattern)
        self._core_re = _alternation(cores, _loose_pattern)
        self._encoded_re = _alternation(encoded, re.escape)
        self._prefixes: dict[str, str] = {}
        for norm, kind in [*exact.items(), *((name, NAME) for name in self.first_names)]:
            for n in range(min(min_prefix, len(norm)), len(norm)):
                self._prefixes.setdefault(norm[:n], kind)
        self._core_prefixes = {c[:n] for c in cores for n in range(1, len(c))}
        self._max_core = max(map(len, cores), default=0)
        self._encoded_prefixes = {e[:n] for e in encoded for n in range(min(6, len(e)), len(e))}
        self._max_len = max((len(s) for s in (*exact, *encoded)), default=0) + 2 * max(map(len, cores), default=0)

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        t = f.text
        out: list[Span] = []
        if self._exact_re is not None:
            for m in self._exact_re.finditer(t):
                out.append(Span(*f.span(m.start(), m.end()), self.exact.get(" ".join(m.group().split()), CANARY)))
        if self._first_re is not None:
            # A first name alone is a name only where it is written as one: "Jane", "JANE", not "jane".
            for m in self._first_re.finditer(t):
                a, b = f.span(m.start(), m.end())
                if text[a].isupper():
                    out.append(Span(a, b, NAME))
        if self._core_re is not None:
            out += [Span(*f.span(m.start(), m.end()), CANARY) for m in self._core_re.finditer(t)]
        if self._encoded_re is not None:
            for m in self._encoded_re.finditer(t):
                a, b = m.start(), m.end()
                while a > 0 and t[a - 1] in _ENCODED_CHARS:
                    a -= 1
                while b < len(t) and t[b] in _ENCODED_CHARS:
                    b += 1
                out.append(Span(*f.span(a, b), self.encoded.get(m.group(), CANARY)))
        return _merge(out)

    def hazard(self, text: str) -> Span | None:
        if not (self._prefixes or self._core_prefixes or self._encoded_prefixes):
            return None
        offset = max(0, len(text) - 2 * self._max_len - 8)
        f = fold(text[offset:])
        tail = f.text
        best: int | None = None
        kind_at: str = CANARY
        if self._prefixes:
            for m in re.finditer(r"(?<!\w)\w|(?<=\s)[^\w\s]|^[^\w\s]", tail):
                candidate = " ".join(tail[m.start() :].split())
                # A trailing space is kept: "test user " is still a prefix of "test user one".
                if tail.endswith((" ", "\n")) and candidate:
                    candidate += " "
                kind = self._prefixes.get(candidate)
                if kind is not None:
                    best, kind_at = m.start(), kind
                    break
        if self._core_prefixes:
            # "4 8 2" at the end may still become "4 8 2 9 1 3": from the earliest start that fits.
            for m in re.finditer(r"(?<![a-z0-9])[a-z0-9]", tail[-3 * self._max_core - 3 :] if self._max_core else ""):
                start = m.start() + max(0, len(tail) - 3 * self._max_core - 3)
                rest = tail[start:]
                if _LOOSE_TAIL.fullmatch(rest) and re.sub(r"[\s.\-_/,:|]", "", rest) in self._core_prefixes:
                    if best is None or start < best:
                        best, kind_at = start, CANARY
                    break
        if self._encoded_prefixes:
            m = re.search(r"[a-z0-9+/=_-]+\Z", tail)
            if m:
                word = m.group()
                for i in range(len(word)):
                    if word[i:] in self._encoded_prefixes:
                        start = m.start() + i
                        if best is None or start < best:
                            best, kind_at = start, CANARY
                        break
        return None if best is None else Span(offset + f.raw_start(best), len(text), kind_at)


def _word_pattern(norm: str) -> str:
    body = r"\s+".join(re.escape(w) for w in norm.split(" "))
    # Word boundaries only where the string itself starts or ends with a word character,
    # so "user.one@example.invalid" still matches inside "<user.one@example.invalid>".
    left = r"(?<!\w)" if norm[0].isalnum() or norm[0] == "_" else ""
    right = r"(?!\w)" if norm[-1].isalnum() or norm[-1] == "_" else ""
    return f"{left}{body}{right}"


def _loose_pattern(core: str) -> str:
    return r"(?<![a-z0-9])" + _SEPARATOR.join(re.escape(c) for c in core) + r"(?![a-z0-9])"


def _alternation(strings: Iterable[str], pattern: Callable[[str], str]) -> re.Pattern[str] | None:
    ordered = sorted(set(strings), key=len, reverse=True)
    return re.compile("|".join(pattern(s) for s in ordered)) if ordered else None


# ----------------------------------------------------------------------------------------------
# Verbatim private n-grams
# ----------------------------------------------------------------------------------------------

_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)


def _mix(h: np.ndarray) -> np.ndarray:
    # splitmix64's finalizer: a polynomial hash mod 2^64 keeps structure in its low bits.
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@functools.lru_cache(maxsize=8)
def _powers(n: int) -> np.ndarray:
    powers = np.ones(n, dtype=np.uint64)
    # Arithmetic mod 2^64 is the point: overflow wraps, as the hash intends.
    with np.errstate(over="ignore"):
        for i in range(n - 2, -1, -1):
            powers[i] = powers[i + 1] * _HASH_BASE
    powers.flags.writeable = False
    return powers


def _window_hashes(ids: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Hash of every window of `n` consecutive ids, as uint64 (the rolling polynomial hash, vectorized)."""
    arr = np.asarray(ids, dtype=np.uint64)
    if arr.size < n:
        return np.zeros(0, dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(arr + np.uint64(1), n)
    with np.errstate(over="ignore"):
        return _mix(windows @ _powers(n))


def _hashes_of_many(sequences: Sequence[Sequence[int]], n: int) -> np.ndarray:
    """Window hashes of many sequences in one pass; windows that straddle two sequences are dropped."""
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    if not lengths.size or lengths.sum() < n:
        return np.zeros(0, dtype=np.uint64)
    flat = np.concatenate([np.asarray(s, dtype=np.uint64) for s in sequences])
    which = np.repeat(np.arange(lengths.size), lengths)
    hashes = _window_hashes(flat, n)
    return hashes[which[: hashes.size] == which[n - 1 :]]


class VerbatimNgramDetector(Detector):
    """Runs of `n`+ Specialist tokens that occur in the private history and not in the public prompt.

    Matching works on token IDs (`find_ids`, what actually goes on the wire) and on text
    (`find`, which re-tokenizes with the Specialist tokenizer and maps back to characters). A hash
    collision can only over-redact, never let a span through. `public_texts` removes n-grams that
    are common outside the user's history (boilerplate), trading some protection for quality.

    A run counts when it copies a passage: at least `min_words` words (`run_words`: pieces between
    spaces with two letters or more), or `long_run` tokens (default `2 n`) whatever it is made of.
    Eight tokens are a phrase of prose, but only four digits of a date to a tokenizer that splits
    digits (SmolLM2's ", 2018-0" of "(subject, 2018-07-13)", which every commit reference ends
    with), or one hyphenated identifier ("/check-non-portable-shell"): public forms that ordinary
    text repeats. Numbers and single identifiers that are personal are the pattern and
    registered-string detectors' to find; a longer copy of anything still counts. `min_words=0`
    counts every run of `n` tokens (a leakage measurement's strict reading).
    """

    def __init__(
        self,
        history_hashes: np.ndarray,
        tokenizer: Tokenizer,
        n: int,
        exclude: np.ndarray | None = None,
        *,
        min_words: int = 3,
        long_run: int | None = None,
    ):
        if n < 2:
            raise ValueError(f"a verbatim n-gram needs n >= 2 tokens; got {n}")
        if min_words < 0:
            raise ValueError(f"min_words must be >= 0; got {min_words}")
        self.n = n
        self.tokenizer = tokenizer
        self.min_words = min_words
        self.long_run = 2 * n if long_run is None else max(long_run, n)
        hashes = np.unique(np.asarray(history_hashes, dtype=np.uint64))
        if exclude is not None and exclude.size:
            hashes = hashes[~_contains(np.unique(exclude), hashes)]
        self.hashes = hashes

    @classmethod
    def from_texts(
        cls,
        history: Iterable[str],
        tokenizer: Tokenizer,
        *,
        n: int = 8,
        public_texts: Iterable[str] = (),
        min_words: int = 3,
        long_run: int | None = None,
    ) -> VerbatimNgramDetector:
        """Index the private history (e.g. each entry's subject and body) once per device."""
        hashes = _hashes_of_many(_encode_all(tokenizer, history), n)
        exclude = _hashes_of_many(_encode_all(tokenizer, public_texts), n)
        return cls(hashes, tokenizer, n, exclude, min_words=min_words, long_run=long_run)

    def for_prompt(self, prompt: str) -> VerbatimNgramDetector:
        exclude = _window_hashes(_encode_all(self.tokenizer, [prompt])[0], self.n)
        return VerbatimNgramDetector(
            self.hashes, self.tokenizer, self.n, exclude, min_words=self.min_words, long_run=self.long_run
        )

    def __len__(self) -> int:
        return int(self.hashes.size)

    def find_ids(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Maximal runs `[a, b)` of token positions covered by private n-grams that copy a passage."""
        hits = _contains(self.hashes, _window_hashes(ids, self.n))
        runs: list[tuple[int, int]] = []
        for i in np.flatnonzero(hits).tolist():
            if runs and i <= runs[-1][1]:
                runs[-1] = (runs[-1][0], i + self.n)
            else:
                runs.append((i, i + self.n))
        return [(a, b) for a, b in runs if self._is_passage(ids, a, b)]

    def _is_passage(self, ids: Sequence[int], a: int, b: int) -> bool:
        if self.min_words == 0 or b - a >= self.long_run:
            return True
        return run_words(_decode(self.tokenizer, [int(t) for t in ids[a:b]])) >= self.min_words

    def find(self, text: str) -> list[Span]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)  # type: ignore[operator]
        offsets = enc["offset_mapping"]
        return [Span(offsets[a][0], offsets[b - 1][1], PRIVATE_NGRAM) for a, b in self.find_ids(enc["input_ids"])]


# Scripts written without spaces between words: each character counts as a word of its own.
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]")


def run_words(text: str) -> int:
    """Words in `text`: pieces between white space with at least two letters (a number, a date or
    punctuation is none; "non-portable-shell" is one), plus one per character of a script written
    without spaces (Han, kana, Thai)."""
    words = 0
    for piece in text.split():
        unspaced = len(_UNSPACED.findall(piece))
        words += unspaced if unspaced else int(len(_LETTER.findall(piece)) >= 2)
    return words


def _contains(sorted_set: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Membership of each query in a sorted unique array (binary search; np.isin re-sorts the set)."""
    if not sorted_set.size or not queries.size:
        return np.zeros(queries.size, dtype=bool)
    idx = np.minimum(np.searchsorted(sorted_set, queries), sorted_set.size - 1)
    return sorted_set[idx] == queries


def _encode_all(tokenizer: Tokenizer, texts: Iterable[str]) -> list[list[int]]:
    batch = [t for t in texts if t]
    if not batch:
        return [[]]
    return list(tokenizer(batch, add_special_tokens=False)["input_ids"])  # type: ignore[operator]


# ----------------------------------------------------------------------------------------------
# The guard
# ----------------------------------------------------------------------------------------------


class Policy(StrEnum):
    """What happens to a span at the front of the uplink (a deployment setting)."""

    # Each policy is also the decision the device records (`core.session_types.GuardDecision`).
    PLACEHOLDER = GuardDecision.PLACEHOLDER.value  # the cloud gets placeholder tokens, the user's text the real span
    KEEP_LOCAL = GuardDecision.KEEP_LOCAL.value  # nothing of it goes up: the device finishes the text alone


@dataclass(frozen=True)
class GuardVerdict:
    """What to send of `new_ids` (indices below are into `new_ids`).

    cut_at      first token not to send (it touches a span or a hazard); None: send all `send` tokens
    span_end    with a cut: the first token after the sensitive span (`len(new_ids)` if it runs to the end)
    kind        the kind of the span at `cut_at` (None without a cut)
    placeholder its label, e.g. "<EMAIL>" (the audit record's `placeholder`)
    hold        the cut comes from a hazard, or a span that reaches the end of the text: drafting
                further locally may change the verdict; a device that cannot must treat it as final
    spans       every complete span touching the new tokens, in characters of the decoded window
    action      "pass", "cut" (send a shorter draft), "hold", or the policy ("placeholder", "keep-local")
    """

    cut_at: int | None
    span_end: int | None = None
    kind: str | None = None
    placeholder: str | None = None
    hold: bool = False
    spans: tuple[Span, ...] = ()
    action: str = "pass"


@dataclass(frozen=True)
class EgressGuard:
    """Detectors plus the deployment's policy; one instance per session (`for_prompt`)."""

    detectors: tuple[Detector, ...]
    policy: Policy = Policy.PLACEHOLDER
    context_chars: int = 512  # committed text re-scanned for spans that continue into the draft
    context_tokens: int = 96  # committed tokens decoded by `check` for the same purpose
    placeholders: Mapping[str, str] = field(default_factory=lambda: dict(PLACEHOLDERS))

    def __post_init__(self) -> None:
        object.__setattr__(self, "detectors", tuple(self.detectors))
        object.__setattr__(self, "policy", Policy(self.policy))

    @classmethod
    def for_profile(
        cls,
        history: Iterable[str],
        tokenizer: Tokenizer,
        *,
        identities: Mapping[str, str] | None = None,
        canaries: Iterable[str] = (),
        policy: Policy = Policy.PLACEHOLDER,
        n: int = 8,
        public_texts: Iterable[str] = (),
    ) -> EgressGuard:
        """The standard guard: personal-data patterns, verbatim history n-grams, identities and canaries."""
        history = list(history)
        registered: dict[str, str] = dict(identities or {})
        registered.update({c: CANARY for c in canaries})
        detectors: list[Detector] = [
            PiiDetector(),
            VerbatimNgramDetector.from_texts(history, tokenizer, n=n, public_texts=public_texts),
        ]
        if registered:
            # Words the history writes in lower case are words, not names: "Will Smith"'s "Will"
            # alone is not redacted in a history that says "we will".
            words = {w for text in history for w in re.findall(r"(?<![A-Za-z])[a-z]{3,}(?![A-Za-z])", text)}
            detectors.append(CanaryDetector(registered, common_words=words))
        return cls(tuple(detectors), policy)

    def for_prompt(self, prompt: str) -> EgressGuard:
        """The guard for one session: n-grams of the public prompt are not private."""
        return replace(self, detectors=tuple(d.for_prompt(prompt) for d in self.detectors))

    def without_local_part_holds(self) -> EgressGuard:
        """This guard, not holding a bare trailing word as a possible address local part (for the
        end of a text: nothing more will be written, so a word stays a word)."""
        detectors = [
            PiiDetector(d.kinds, hold_local_parts=False) if isinstance(d, PiiDetector) else d for d in self.detectors
        ]
        return replace(self, detectors=tuple(detectors))

    def placeholder_for(self, kind: str) -> str:
        return self.placeholders.get(kind, "<PRIVATE>")

    def placeholder_ids(self, kind: str, tokenizer: Tokenizer) -> list[int]:
        """The placeholder's Specialist token IDs, what the cloud commits in place of the span."""
        return list(tokenizer.encode(self.placeholder_for(kind), add_special_tokens=False))

    # -- text level ---------------------------------------------------------------------------

    def inspect(self, committed_text: str, draft_text: str) -> list[Span]:
        """Complete sensitive spans touching `draft_text`, in characters of `committed_text + draft_text`.

        Overlapping spans are merged (named after the most specific kind). A span that starts in
        the committed text and continues into the draft is included.
        """
        start = max(0, len(committed_text) - self.context_chars)
        window = committed_text[start:] + draft_text
        boundary = len(committed_text) - start
        raw = [s for d in self.detectors for s in d.find(window) if s.end > boundary]
        return [Span(s.start + start, s.end + start, s.kind) for s in _merge(raw)]

    def hazard(self, committed_text: str, draft_text: str) -> Span | None:
        """The earliest place from which the end of the text could still grow into a span, if any."""
        start = max(0, len(committed_text) - self.context_chars)
        window = committed_text[start:] + draft_text
        # A token that ends inside a multi-byte character decodes to U+FFFD: the character is not
        # known yet ("ѕ" of a homoglyph address), so what precedes it is judged as if the text
        # went on, and the partial character itself is held.
        whole = window.rstrip("\ufffd")
        found = [Span(h.start, len(window), h.kind) for d in self.detectors if (h := d.hazard(whole)) is not None]
        if len(whole) < len(window):
            found.append(Span(len(whole), len(window), PRIVATE_NGRAM))
        h = min(found, default=None)
        return None if h is None else Span(h.start + start, h.end + start, h.kind)

    # -- token level --------------------------------------------------------------------------

    def check(
        self,
        committed_ids: Sequence[int],
        new_ids: Sequence[int],
        tokenizer: Tokenizer,
        *,
        send: int | None = None,
        final: bool = False,
    ) -> GuardVerdict:
        """Decide what of `new_ids[:send]` may go up; `new_ids[send:]` is local look-ahead only.

        `committed_ids` is the device's real committed text (Specialist IDs); only its last
        `context_tokens` are decoded. `new_ids` is normally the pending recovery plus the draft.
        `final` says the text ends with `new_ids` (end of sequence): nothing can grow any more, so
        hazards are dropped and complete spans do not hold. A text cut by the token budget is not
        final - the device can still look ahead locally to decide.
        """
        new = list(new_ids)
        send = len(new) if send is None else send
        if not 0 <= send <= len(new):
            raise ValueError(f"send must be in [0, {len(new)}]; got {send}")
        ctx = list(committed_ids[-self.context_tokens :]) if self.context_tokens else []
        text, offs, split = _token_bounds(tokenizer, ctx, new)
        boundary = offs[0]
        spans = self.inspect(text[:boundary], text[boundary:])
        # The wire carries IDs: match private n-grams on the IDs as drafted, too (a draft need not
        # be the canonical tokenization the text-level match re-derives).
        for d in self.detectors:
            if isinstance(d, VerbatimNgramDetector):
                for a, b in d.find_ids(ctx + new):
                    if b > len(ctx):
                        s = offs[max(a - len(ctx), 0)] if a >= len(ctx) else max(0, boundary - 1)
                        spans.append(Span(s, offs[b - len(ctx)], PRIVATE_NGRAM))
        spans = _merge(spans)
        hazard = None if final else self.hazard(text[:boundary], text[boundary:])

        cut: int | None = None
        chosen: Span | None = None
        for s in spans:
            i = _first_touching(offs, s, split)
            if i is not None and (cut is None or i < cut):
                cut, chosen = i, s
        hold = False
        if hazard is not None:
            i = _first_touching(offs, hazard, split)
            # A hazard from the same token as a complete span means the span may still grow
            # ("Jane" of "Jane Do"): hold rather than replace a part of it. (An address already
            # complete before a trailing " d" stays that address; its end may still grow anyway.)
            tie = i == cut and chosen is not None and not (chosen.kind == hazard.kind == EMAIL)
            if i is not None and (cut is None or i < cut or tie):
                cut, chosen, hold = i, hazard, True
        if cut is None or chosen is None or cut >= send:
            return GuardVerdict(None, spans=tuple(spans))
        # A complete span that runs to the end of what was inspected may still grow ("...@example.co" + "m").
        hold = hold or (chosen.end >= len(text) and not final)
        end = next((j for j in range(cut + 1, len(new) + 1) if offs[j] >= chosen.end), len(new))
        if hold:
            action = "hold"
        elif cut > 0:
            action = GuardDecision.CUT.value
        else:
            action = self.policy.value
        return GuardVerdict(
            cut_at=cut,
            span_end=end,
            kind=chosen.kind,
            placeholder=self.placeholder_for(chosen.kind),
            hold=hold,
            spans=tuple(spans),
            action=action,
        )


def token_offsets(tokenizer: Tokenizer, context: Sequence[int], new: Sequence[int]) -> tuple[str, list[int]]:
    """Decoded `context + new`, and the character offset where each new token starts (plus the end).

    Offsets come from decoding growing prefixes. Where a prefix does not decode to a prefix of the
    whole (a token splits a multi-byte character), the offset falls back to the common prefix: the
    split character counts as the later token's (`_token_bounds` also says which ones split).
    """
    full, offs, _ = _token_bounds(tokenizer, context, new)
    return full, offs


def _token_bounds(
    tokenizer: Tokenizer, context: Sequence[int], new: Sequence[int]
) -> tuple[str, list[int], list[bool]]:
    """`token_offsets`, plus for each offset whether it falls inside a character (the token before
    it carries some of that character's bytes, the token after it the rest)."""
    ids = list(context) + list(new)
    full = _decode(tokenizer, ids)
    offs: list[int] = []
    split: list[bool] = []
    for i in range(len(new) + 1):
        prefix = _decode(tokenizer, ids[: len(context) + i]) if i < len(new) else full
        offs.append(_common_prefix(prefix, full))
        split.append(not full.startswith(prefix))
    for i in range(len(offs) - 2, -1, -1):
        offs[i] = min(offs[i], offs[i + 1])
    return full, offs, split


def _decode(tokenizer: Tokenizer, ids: list[int]) -> str:
    if not ids:
        return ""
    # A fast tokenizer's Rust backend decodes exactly as `decode(..., clean_up_tokenization_spaces=False)`
    # does, without the Python-side conversions that dominate the guard's cost.
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.decode(ids, skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def _common_prefix(a: str, b: str) -> int:
    if b.startswith(a):
        return len(a)
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _first_touching(offs: list[int], span: Span, split: Sequence[bool]) -> int | None:
    """The first new token whose characters overlap `span` (a span before all new tokens touches none).

    A token that ends inside a character (`split[i + 1]`) carries bytes of it: it touches that
    character too, so the first bytes of a span's first character never go up ahead of the cut.
    """
    for i in range(len(offs) - 1):
        a, b = offs[i], offs[i + 1]
        if split[i + 1]:
            b += 1
        if (a < span.end and b > span.start) or (a == b and span.start <= a < span.end):
            return i
    return None


def _merge(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for s in sorted(spans):
        if out and s.start < out[-1].end:
            last = out[-1]
            kind = min(last.kind, s.kind, key=lambda k: _PRIORITY.index(k) if k in _PRIORITY else len(_PRIORITY))
            out[-1] = Span(last.start, max(last.end, s.end), kind)
        else:
            out.append(s)
    return out
