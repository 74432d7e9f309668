"""Recognition by the libraries made for each kind, behind the guard's own streaming (issue 30).

The guard decides per round, on a growing text, where a span may still be forming (`hazard`); no
library streams, so that part stays ours. What a complete span *is* comes from well-kept
libraries wherever one exists:

* phone numbers: libphonenumber (`phonenumbers.PhoneNumberMatcher`, leniency POSSIBLE: an unassigned
  range is still a number someone wrote) over every
  region's numbering plan for numbers written with a country code ("+44 ...", "(+44) ...",
  "+(31) ...", "0044 ..."), also where a line break or spaces split the groups; national
  numbers without a country code stay with `privacy.pii`'s patterns (run for every region, the
  matcher finds timestamps, IP addresses and version numbers that are valid numbers somewhere),
  plus digit groups ("98765 43210", "(11) 91234-5678") and spelled digits that libphonenumber
  calls valid in one of a few regions with strict plans (`_NATIONAL_REGIONS`, issue #49);
* payment cards: `stdnum.luhn` with the card lengths, in groups separated by spaces, hyphens,
  dots or line breaks;
* national identifiers where a checksum or a fixed shape makes them cheap to tell apart:
  US SSN, Spanish DNI, Dutch BSN, French NIR, Canadian SIN (`stdnum`), UK NINO (its shape);
  a Swedish personnummer, Danish CPR, Finnish HETU and Korean RRN by their date-separator-check
  shape (`ShapeRecognizer`), and about thirty more of stdnum's personal identifiers after their
  names (PESEL, fødselsnummer, CNP, EGN, AMKA, OIB, TC kimlik, CURP, RUT, AHV, ...:
  `KeywordValueRecognizer`), each with its checksum;
* secrets: detect-secrets' vendor-key plugins (AWS, GitHub, GitLab, Slack, Stripe, SendGrid,
  npm, PyPI, Twilio, ...), its keyword patterns (`password = ...`), its private-key headers and
  its Shannon entropy (`Base64HighEntropyString.calculate_shannon_entropy`) for random-looking
  words; plus JWTs and their fragments (a word that starts with `eyJ`, base64 of `{"`).

detect-secrets is used without its baseline, file scanning or verification (which would reach the
network): only the plugins' compiled regexes and the entropy function, on the text at hand.
Every recognizer reports spans in characters of the text it was given and a hazard where the end
of the text may still grow into one of its spans.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from specsteer.privacy.normalize import DIGIT_WORD_PREFIXES, DIGIT_WORDS, Folded, fold, fold_string
from specsteer.privacy.spans import (
    ADDRESS,
    CARD,
    EMAIL,
    IBAN,
    IP,
    NATIONAL_ID,
    PHONE,
    SECRET,
    Detector,
    Span,
    merge_spans,
)

__all__ = [
    "CardRecognizer",
    "KeywordValueRecognizer",
    "NationalIdRecognizer",
    "PhoneRecognizer",
    "SecretRecognizer",
    "SeedPhraseRecognizer",
    "ShapeRecognizer",
    "WrappedEmailRecognizer",
    "looks_random",
    "unwrapped",
]


# -- text views: a transformed text that still knows where each character came from ----------------


class _View:
    """`text` with some substrings replaced; `raw(i)` maps an index of the view back to `text`."""

    def __init__(self, text: str, subs: Iterable[tuple[int, int, str]]) -> None:
        parts: list[str] = []
        index: list[int] = []
        pos = 0
        for a, b, rep in sorted(subs):
            if a < pos:
                continue
            parts.append(text[pos:a])
            index.extend(range(pos, a))
            parts.append(rep)
            index.extend([a] * len(rep))
            pos = b
        parts.append(text[pos:])
        index.extend(range(pos, len(text) + 1))
        self.text = "".join(parts)
        self._index = index

    def raw(self, i: int) -> int:
        return self._index[min(i, len(self._index) - 1)]

    def span(self, a: int, b: int) -> tuple[int, int]:
        return self.raw(a), self.raw(b - 1) + 1 if b > a else self.raw(a)


# A line break (with any indentation) or a run of spaces between two digit groups is one space;
# a leading "00" or "(00" international prefix is "+".
_DIGIT_GAP = re.compile(r"(?<=[\d)\-])[ \t]*\n[ \t]*(?=[\d(+])|(?<=[\d)])[ \t]{2,}(?=\d)")
_DOUBLE_ZERO = re.compile(r"(?<![\w+])00(?=[1-9]\d)")


def _phone_view(text: str) -> _View:
    subs = [(m.start(), m.end(), " ") for m in _DIGIT_GAP.finditer(text)]
    subs += [(m.start(), m.end(), "+") for m in _DOUBLE_ZERO.finditer(text)]
    return _View(text, subs)


@functools.lru_cache(maxsize=1)
def _phonenumbers() -> Any:
    import phonenumbers

    return phonenumbers


class PhoneRecognizer(Detector):
    """Phone numbers with a country code, every region, by libphonenumber (see the module docstring)."""

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        view = _phone_view(f.text)
        out = []
        if view.text != f.text:
            # A national number broken by a line break: the national patterns on the joined view.
            from specsteer.privacy.pii import PiiDetector

            out += [Span(*f.span(*view.span(s.start, s.end)), PHONE) for s in PiiDetector([PHONE]).find(view.text)]
        for m in _NATIONAL_PHONE.finditer(f.text):
            raw = f.span(*m.span())
            # Columns of a table ("24701\t31384") are not one number.
            if "\t" not in text[raw[0] : raw[1]] and _national_phone_ok(m):
                out.append(Span(*raw, PHONE))
        if "+" not in f.text and "00" not in f.text:
            return merge_spans(out)
        pn = _phonenumbers()
        for m in pn.PhoneNumberMatcher(view.text, "ZZ", leniency=pn.Leniency.POSSIBLE):
            start = m.start
            # The matcher leaves out the "(" of "(+44)"; the span starts at it.
            if start > 0 and view.text[start - 1] == "(" and m.raw_string.startswith("+"):
                start -= 1
            out.append(Span(*f.span(*view.span(start, m.end)), PHONE))
        return merge_spans(out)

    def hazard(self, text: str) -> Span | None:
        # "(+44) 20 79" or "+44 20 7946\n" at the end may still grow into a number.
        m = _PHONE_HAZARD.search(fold(text[-64:]).text) or _SPELLED_PHONE_HAZARD.search(fold(text[-64:]).text)
        if m is None:
            # The first number word after a phone's cue ("my number is nine"), which folding
            # leaves a word until the second one comes.
            first = _FIRST_SPELLED_DIGIT.search(text[-64:].lower())
            if first is None:
                return None
            return Span(len(text) - len(text[-64:]) + first.start("word"), len(text), PHONE)
        start = len(text) - len(text[-64:]) + fold(text[-64:]).raw_start(m.start())
        return Span(start, len(text), PHONE)


# A number in a national format, without its country code (issue #49): digit groups with single
# spaces or hyphens ("98765 43210", "030 1234 5678"), an area code in parentheses ("(11) 91234-5678"),
# or single digits a row of number words folded to ("nine eight seven ..."). Only what libphonenumber
# calls a valid number of one of `_NATIONAL_REGIONS` counts: a build number or a count is not one.
_NATIONAL_PHONE = re.compile(
    r"(?<![\w.+\-/:#])(?:(?:\(\d{2,4}\)[ ]?)?\d{2,5}(?:[ \-]\d{2,5}){1,4}|\d(?:,? \d){8,11})(?![\w\-/:]|[.,]\d)"
)
# Single digits a row of number words folded to, still being written ("nine three six", "nine
# three six five six, th"): the number may go on; held from its first digit. Two digits at least
# (one number word alone is not folded to a digit).
_FIRST_SPELLED_DIGIT = re.compile(
    r"(?:number|phone|mobile|cell|call|text|whatsapp|ring|reach|dial|tel)\b[^.\n]{0,16}?(?<![\w])(?P<word>(?:"
    + "|".join(sorted(DIGIT_WORDS, key=len, reverse=True))
    + r")?,?[ ]?(?:"
    + "|".join(sorted(DIGIT_WORD_PREFIXES | DIGIT_WORDS, key=len, reverse=True))
    + r"))\Z"
)
_SPELLED_PHONE_HAZARD = re.compile(
    r"(?<![\w.+\-/:#])\d(?:,? \d){1,11}(?:,? (?:"
    + "|".join(sorted(DIGIT_WORD_PREFIXES | DIGIT_WORDS, key=len, reverse=True))
    + r"))?,? ?\Z"
)
# Regions whose numbering plans are strict enough that a valid national number is rarely a run of
# counts: Germany, China, Indonesia, Nigeria and North America (found by its own patterns) accept
# most 10-12 digit strings ("8080 9090 3000", "2023-12-01 10") and are left out.
_NATIONAL_REGIONS = (
    "IN", "BR", "GB", "FR", "ES", "IT", "NL", "SE", "PL", "JP", "KR", "AU", "MX", "AR", "RU", "TR", "ZA", "PH",
)  # fmt: skip
_DATE_LIKE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}-\d{2}-\d{4}")


def _national_phone_ok(m: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", m.group())
    if not 9 <= len(digits) <= 12 or _DATE_LIKE.search(m.group()):
        return False
    # Spelled digits with commas between groups ("9 3 6 5 6, 3 2 4 4 5"): parsed as the digits.
    written = digits if "," in m.group() else m.group()
    # A row of counting digits ("1 2 3 4 5 6 7 8 9 0") is a keyboard or a list, not a number.
    if all((int(b) - int(a)) % 10 == 1 for a, b in itertools.pairwise(digits)):
        return False
    pn = _phonenumbers()
    for region in _NATIONAL_REGIONS:
        try:
            number = pn.parse(written, region)
        except pn.NumberParseException:
            continue
        if pn.is_valid_number(number):
            return True
    return False


_PHONE_HAZARD = re.compile(
    r"(?<![\w+])(?:\(\s*\+?|\+\s*\(?)\d[\d\s().\-/]{0,24}\Z|(?<![\w+])\(?00\d[\d\s().\-/]{0,24}\Z"
    # An area code in parentheses, and the digits after it ("(11) 9123"): a national number begins.
    r"|(?<![\w+])\(\d{2,4}\)[ ]?\d{0,5}(?:-\d{0,4})?\Z"
)


# -- payment cards ----------------------------------------------------------------------------------

_CARD_CANDIDATE = re.compile(r"(?<![\w.,-])\d(?:(?:[ .\-]{1,3}|[ ]*\n[ ]*)?\d){12,18}(?![\w-]|[.,]\d)")


def _card_ok(raw: str) -> bool:
    from stdnum import luhn

    from specsteer.privacy.pii import _CARD_PREFIX  # the card networks' prefixes, as PiiDetector's

    groups = [g for g in re.split(r"[^\d]+", raw) if g]
    digits = "".join(groups)
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits) or not luhn.is_valid(digits):
        return False
    if len(groups) == 1:
        return True
    seps = {s.strip(" ") or " " for s in re.findall(r"[^\d]+", raw) if "\n" not in s}
    # One kind of separator, in groups of 3+ digits (4-4-4-4, Amex 4-6-5): a table of single
    # digits or mixed punctuation is not a card.
    return len(seps) <= 1 and all(len(g) >= 3 for g in groups[:-1])


class CardRecognizer(Detector):
    """Card numbers grouped by spaces, hyphens, dots or line breaks; Luhn by `stdnum.luhn`."""

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        return merge_spans(
            Span(*f.span(m.start(), m.end()), CARD) for m in _CARD_CANDIDATE.finditer(f.text) if _card_ok(m.group())
        )


# -- national identifiers -------------------------------------------------------------------------

_NINO = re.compile(r"(?<![a-z0-9])(?![dfiquv])[a-z](?![dfiquvo])[a-z] ?\d{2} ?\d{2} ?\d{2} ?[a-d](?![a-z0-9])")
_SSN = re.compile(r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])")
_DNI = re.compile(r"(?<![\w-])\d{8}-?[a-z](?![\w-])")
_NINE = re.compile(r"(?<![\w.,-])\d{3}[ ]?\d{3}[ ]?\d{3}(?![\w-]|[.,]\d)")
_NIR = re.compile(r"(?<![\w.,-])[12][ ]?\d{2}[ ]?\d{2}[ ]?(?:\d{2}|2[ab])[ ]?\d{3}[ ]?\d{3}[ ]?\d{2}(?![\w-]|[.,]\d)")


def _stdnum_valid(module: str, value: str) -> bool:
    import importlib

    try:
        return bool(importlib.import_module(f"stdnum.{module}").is_valid(value))
    except KeyError:
        # stdnum.cn.ric looks a region code up and reads its county, and a code its table knows only
        # as a province has none: a KeyError where it means "no county, not valid" (what it says
        # for a code it does not know). Without this, "resident identity card 119900198001011238"
        # in a draft crashed the guard (found by the TypeScript port's parity run).
        return False


class NationalIdRecognizer(Detector):
    """National identifiers with a checksum or a fixed shape (see the module docstring)."""

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        t = f.text
        out = [m.span() for m in _NINO.finditer(t)]
        out += [m.span() for m in _SSN.finditer(t) if _stdnum_valid("us.ssn", m.group())]
        out += [m.span() for m in _DNI.finditer(t) if _stdnum_valid("es.dni", m.group().upper())]
        out += [m.span() for m in _NIR.finditer(t) if _stdnum_valid("fr.nir", m.group().upper())]
        for m in _NINE.finditer(t):
            v = m.group()
            if (" " not in v and _stdnum_valid("nl.bsn", v)) or _stdnum_valid("ca.sin", v):
                out.append(m.span())
        return merge_spans(Span(*f.span(a, b), NATIONAL_ID) for a, b in out)

    def hazard(self, text: str) -> Span | None:
        tail = text[-24:]
        f = fold(tail)
        m = _NINO_HAZARD.search(f.text)
        return None if m is None else Span(len(text) - len(tail) + f.raw_start(m.start()), len(text), NATIONAL_ID)


_NINO_HAZARD = re.compile(r"(?<![a-z0-9])[a-z]{2} (?:\d{1,2}(?: ?\d{0,2}){0,3} ?)?\Z")


# -- secrets ----------------------------------------------------------------------------------------

_SECRET_CHARS = r"A-Za-z0-9+/=_\-"
_WORD = re.compile(rf"[{_SECRET_CHARS}.]+")
_JWT_PART = re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]*){0,2}")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[ \t]*\n?")
_KEY_END = re.compile(r"\n?-----END ")
# A value assigned to a secret-sounding name: "DB_PASSWORD=...", "api_key: ...", '"client_secret": "..."',
# "--password ...", "export API_TOKEN=...". The value is what is secret, whatever its characters
# (a password is punctuation as much as letters): everything up to a space or a quote, as
# detect-secrets' KeywordDetector takes it, less a trailing separator ("," or ";").
_KEYWORD_NAME = (
    r"(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|auth[_-]?key|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret|credentials?)(?:[\w-]*?)[\"'\]]{0,2}[ \t]*(?:[:=]{1,3}|[ \t](?=[\"']))[ \t]*[\"'`]?"
)
_VALUE = r"[^\s\"'`]"
_KEYWORD = re.compile(_KEYWORD_NAME + rf"(?P<value>{_VALUE}{{6,}}(?<![,;]))", re.I)
# Vendor keys detect-secrets 1.5.0 has no plugin for (Google API keys, fine-grained GitHub tokens,
# OpenAI project keys without the legacy marker, GitLab personal tokens).
_MORE_VENDORS = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:AIza[0-9A-Za-z_\-]{35}|github_pat_[0-9A-Za-z_]{22,}|sk-(?:proj-)?[A-Za-z0-9_\-]{32,}"
    r"|glpat-[0-9A-Za-z_\-]{20})"
)
_FLAG_NAME = r"--(?:password|passwd|token|secret|api-key)[ =][\"'`]?"
_FLAG = re.compile(_FLAG_NAME + rf"(?P<value>{_VALUE}{{6,}}(?<![,;]))", re.I)
# The same value while it is being written: held from its first character until a space or a
# quote ends it, so its first tokens do not go up before the whole value is known.
_VALUE_HAZARD = re.compile(rf"(?:{_KEYWORD_NAME}|{_FLAG_NAME})(?P<value>{_VALUE}+)\Z", re.I)
_HEX_ONLY = re.compile(r"[0-9a-fA-F\-]+")
# A word with a lower-case path segment ("org/git/", "//github.com/x/") is a path: split at its slashes.
_PATHLIKE = re.compile(r"(?:^|/)[a-z][a-z.-]+/")
_PART = re.compile(rf"[{_SECRET_CHARS}]+")
_PATH_PART = re.compile(r"[A-Za-z0-9+=_\-]+")


@functools.lru_cache(maxsize=1)
def _vendor_patterns() -> tuple[re.Pattern[str], ...]:
    """The compiled regexes of detect-secrets' vendor-key plugins (not its keyword, entropy or IP ones)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    skip = {"IPPublicDetector", "JwtTokenDetector", "PrivateKeyDetector", "KeywordDetector"}
    out: list[re.Pattern[str]] = []
    plugin: Any
    for plugin in get_mapping_from_secret_type_to_class().values():
        if issubclass(plugin, RegexBasedDetector) and plugin.__name__ not in skip:
            # `denylist` is a class attribute on every vendor plugin (abstract only on the base).
            out.extend(plugin.denylist)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _entropy_plugin() -> Any:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return Base64HighEntropyString()


def looks_random(word: str) -> bool:
    """A word of 16+ characters that reads as generated, not written: upper and lower case letters
    and digits mixed with a high Shannon entropy (detect-secrets' function), no long runs of lower
    case letters (identifiers, paths and prose have them; base64 and tokens do not). Hex-only
    words (commit hashes, digests, UUIDs) are ordinary developer text."""
    w = word.strip("._-=")
    # A "0x" literal is hex too ("0x9E3779B97F4A7C15", a hash's constant).
    if len(w) < 16 or _HEX_ONLY.fullmatch(w.removeprefix("0x")):
        return False
    if not (re.search(r"[a-z]", w) and re.search(r"[A-Z]", w) and re.search(r"\d", w)):
        return False
    wordy = sum(len(r) for r in re.findall(r"[a-z]{4,}|[A-Z][a-z]{3,}", w))
    if wordy > 0.4 * len(w):
        return False
    entropy = float(_entropy_plugin().calculate_shannon_entropy(w))
    return entropy >= min(4.0, 0.78 * _log2(len(w)))


def _log2(n: int) -> float:
    import math

    return math.log2(n)


def secret_values(text: str) -> Iterator[tuple[int, int]]:
    """Character ranges of the secrets `text` shows: vendor keys, keyword values, JWT parts,
    private-key bodies, random-looking words."""
    for pattern in _vendor_patterns():
        for m in pattern.finditer(text):
            g = next((i for i in range(1, (m.re.groups or 0) + 1) if m.group(i)), 0)
            yield m.span(g)
    for pattern in (_JWT_PART, _MORE_VENDORS):
        for m in pattern.finditer(text):
            yield m.span()
    for pattern in (_KEYWORD, _FLAG):
        for m in pattern.finditer(text):
            if not _names_a_secret(text, m.start()):
                continue
            # "password: required.", "token: see below": a word (and its full stop) is not a value.
            value = m.group("value").rstrip(".!?:)")
            if re.search(r"[\d\W_]", value) or (value != value.lower() and value != value.capitalize()):
                yield m.span("value")
    for m in _PRIVATE_KEY.finditer(text):
        end = _KEY_END.search(text, m.end())
        yield m.end(), end.start() if end else len(text)
    for m in _WORD.finditer(text):
        # "AWS_REGION=eu-west-1": a setting's name is no part of its value, judged alone (a value a
        # secret's name announces is `_KEYWORD`'s).
        word, start = m.group(), m.start()
        assigned = _ASSIGNED.match(word)
        if assigned:
            word, start = word[assigned.end() :], start + assigned.end()
        # A URL's path or a dotted name splits into its parts; a token does not.
        for part in re.finditer(_PATH_PART if _PATHLIKE.search(word) else _PART, word):
            if looks_random(part.group()):
                yield start + part.start(), start + part.end()


# A setting's name before its "=" ("AWS_REGION=", "log.level="): upper or lower case words joined
# by "_", "." or "-" (base64 mixes cases, and its "=" ends it).
_ASSIGNED = re.compile(r"(?:[A-Z][A-Z0-9]*(?:[_.-][A-Z0-9]+)*|[a-z][a-z0-9]*(?:[_.-][a-z0-9]+)*)=(?=[^=])")
# The last word of a name that says the value is something about a secret, not one ("TOKEN_URL",
# "PASSWORD_MIN_LENGTH", "SECRET_KEY_FILE", "API_KEY_HEADER").
_NOT_A_SECRET_NAME = frozenset(
    [
        "url",
        "uri",
        "urls",
        "endpoint",
        "host",
        "hostname",
        "domain",
        "file",
        "path",
        "dir",
        "name",
        "names",
        "id",
        "type",
        "length",
        "len",
        "size",
        "ttl",
        "expiry",
        "expires",
        "expiration",
        "timeout",
        "algo",
        "algorithm",
        "header",
        "env",
        "region",
        "policy",
        "mode",
        "format",
        "version",
        "count",
        "enabled",
        "required",
        "min",
        "max",
        "prefix",
        "suffix",
        "location",
        "issuer",
        "audience",
        "scope",
        "scopes",
        "kind",
        "provider",
        "source",
        "label",
        "user",
        "username",
        "rotation",
        "hint",
        "field",
        "param",
        "var",
    ]
)


def _names_a_secret(text: str, start: int) -> bool:
    """The name a keyword match at `start` is part of names a secret: its last word is not one of
    `_NOT_A_SECRET_NAME` ("GITHUB_TOKEN" does, "TOKEN_URL" does not)."""
    name = re.match(r"[\w.-]*", text[start : start + 80])
    words = re.split(r"[_.-]+", name.group().strip("_.-").lower()) if name else []
    return not words or words[-1] not in _NOT_A_SECRET_NAME


# A line break inside a word (a key wrapped at 64 columns, a token broken by an editor) is not there.
_WRAP = re.compile(r"(?<=[A-Za-z0-9+/=_.@])[ \t]*\n[ \t]*(?=[A-Za-z0-9+/=_.@])")


def unwrapped(text: str) -> _View:
    """`text` with line breaks inside words removed (and one at its very end, which may be one)."""
    subs = [(m.start(), m.end(), "") for m in _WRAP.finditer(text)]
    if text.endswith("\n") and len(text) > 1 and not text[-2].isspace():
        subs.append((len(text) - 1, len(text), ""))
    return _View(text, subs)


class SecretRecognizer(Detector):
    """Secrets that are not registered anywhere: detect-secrets' plugins, JWTs, entropy."""

    def find(self, text: str) -> list[Span]:
        view = unwrapped(text)
        found = [Span(a, b, SECRET) for a, b in secret_values(text) if b > a]
        if view.text != text:
            found += [Span(*view.span(a, b), SECRET) for a, b in secret_values(view.text) if b > a]
        spans = merge_spans(found)
        # Pieces of one token joined by a dot or a dash ("header.payload" of a JWT) are one span.
        out: list[Span] = []
        for s in spans:
            if out and s.start - out[-1].end <= 1 and text[out[-1].end : s.start] in ("", ".", "-", "_"):
                out[-1] = Span(out[-1].start, s.end, SECRET)
            else:
                out.append(s)
        return out

    def hazard(self, text: str) -> Span | None:
        # A private key's body runs until its END line.
        for k in _PRIVATE_KEY.finditer(text):
            if not _KEY_END.search(text, k.end()):
                return Span(k.end(), len(text), SECRET)
        # A keyword's value still being written ('DB_PASSWORD="ql'): whatever it turns out to be.
        value = _VALUE_HAZARD.search(text[-200:])
        if value is not None and _names_a_secret(text[-200:], value.start()):
            return Span(len(text) - len(text[-200:]) + value.start("value"), len(text), SECRET)
        # A trailing word that already reads as generated may still grow into a key (also across
        # a line break: the next line may go on with it).
        tail = text[-200:]
        view = unwrapped(tail)
        m: re.Match[str] | None = _TRAILING_WORD.search(view.text)
        if m and _PATHLIKE.search(m.group()):
            m = re.search(r"[A-Za-z0-9+=_\-.]+\Z", view.text)
        if m and (assigned := _ASSIGNED.match(m.group())):  # "AWS_REGION=eu-we": the value alone
            m = re.compile(r".+\Z").search(view.text, m.start() + assigned.end())
        if m and _random_so_far(m.group()):
            return Span(len(text) - len(tail) + view.raw(m.start()), len(text), SECRET)
        return None


_TRAILING_WORD = re.compile(rf"(?<![{_SECRET_CHARS}.])[{_SECRET_CHARS}.]+\Z")
_VENDOR_PREFIX = re.compile(
    r"(?:AKIA|ASIA|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abpors]-|sk_live_|rk_live_|sk-|SG\.|npm_|pypi-|AIza|eyJ)"
)


def _random_so_far(word: str) -> bool:
    if _VENDOR_PREFIX.match(word):
        return True
    w = word.strip("._-=")
    if len(w) < 6 or _HEX_ONLY.fullmatch(w):
        return False
    classes = bool(re.search(r"[a-z]", w)) + bool(re.search(r"[A-Z]", w[1:])) + bool(re.search(r"\d", w))
    wordy = sum(len(r) for r in re.findall(r"[a-z]{3,}|[A-Z][a-z]{2,}", w))
    return classes >= 2 and ("/" in w or "+" in w or "=" in w or classes == 3) and wordy <= 0.35 * len(w)


class WrappedEmailRecognizer(Detector):
    """An address broken by a line break ("jane.doe@exam" + newline + "ple.com"): `privacy.pii`'s
    email patterns on the text with line breaks inside words removed."""

    def find(self, text: str) -> list[Span]:
        view = unwrapped(text)
        if view.text == text:
            return []
        from specsteer.privacy.pii import PiiDetector

        return [Span(*view.span(s.start, s.end), EMAIL) for s in PiiDetector([EMAIL]).find(view.text)]

    def hazard(self, text: str) -> Span | None:
        tail = text[-160:]
        view = unwrapped(tail)
        if view.text == tail:
            return None
        from specsteer.privacy.pii import PiiDetector

        h = PiiDetector([EMAIL]).hazard(view.text)
        return None if h is None else Span(len(text) - len(tail) + view.raw(h.start), len(text), EMAIL)


# -- values a keyword announces (issue: attack 12) -------------------------------------------------
#
# Many identifiers have no shape of their own: a passport number, a 4-digit PIN, an account number,
# a date are ordinary tokens until a keyword says what they are ("passport no. 01MU33842", "garage
# pin 4383", "born 25 July 2004"). Each rule below is a keyword, an introducer ("is", "was", ":",
# "number", or nothing) and the value's shape; a validator (stdnum's checksum, a date, digits or
# symbols in a password) keeps prose out ("the password is required", "private key is 2048 bits").
# While the value is being written the keyword makes it a hazard, so its first tokens wait for
# the rest (held, not replaced: a value that turns out to be prose still goes up as drafted).

# "is" and "was" in the languages the SDK's users write ("Meu CPF é ...", "Steuer-ID ist ...").
# Matched on the folded text (`privacy.normalize.fold`): accents are gone, so "é"/"è" are "e" (a
# bare "e" written as such is not taken for one: `_plain_e`), "är" is "ar"; words of other scripts
# are written here as they are and folded once (`_folded`).
_IS_WORDS = (
    r"(?P<is>is|was|are|were|ist|war|lautet|lautete|heisst|est|es|era|e|ar|er|jest|wynosi)(?![a-z])"
    r"|(?:{})".format("|".join(map(re.escape, map(fold_string, ("は", "是", "为", "為", "는", "은", "이", "가")))))
)
# "is", "was", ":", "=", "#", "number", "no.", "nr." in any order a person writes them, or a space.
# A value may stand in quotes ('password is "Tr0ub4dor&3"'): the quote opens it, the value class
# (which takes no quote) ends at the closing one.
# A value may open with a quote or a parenthesis ("her fødselsnummer (25045018116)").
_OPEN_QUOTE = r"[\"'`\u2018\u201c(]?"
_INTRO = (
    r"(?:'s)?(?:[ \t]*(?:(?:number|numbers|num|nummer|numero|no\.?|nr\.?|#)(?![a-z]))?[ \t]*(?:=>|[:=#-]|"
    + _IS_WORDS
    + r")"
    r"[ \t]*|[ \t]+(?:(?:number|num|no\.?|nr\.?|#)(?![a-z])[ \t]*)?)(?:(?:is|was)[ \t]+)?" + _OPEN_QUOTE
)


@dataclass(frozen=True)
class _Rule:
    """A keyword-anchored value: `keyword` then `_INTRO` then `value` (case-insensitive)."""

    kind: str
    keyword: str
    value: str
    partial: str  # a regex for the value while it is written, for the hazard (`_chars` for a class)
    ok: Callable[[str], bool] = lambda v: True
    bare: bool = True  # the value may follow the keyword after a space alone ("pin 4383")
    # Keywords of scripts that write no space between words (パスワード, 密码, 비밀번호), folded:
    # matched without a word boundary before them.
    unspaced: str = ""

    def _keyword(self) -> str:
        spaced = rf"(?<![\w])(?:{self.keyword})"
        return rf"(?:{spaced}|{self.unspaced})" if self.unspaced else spaced

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        intro = _INTRO if self.bare else _INTRO_STRICT
        return re.compile(rf"{self._keyword()}{intro}(?P<value>{self.value})", re.I)

    @functools.cached_property
    def hazard(self) -> re.Pattern[str]:
        intro = _INTRO if self.bare else _INTRO_STRICT
        return re.compile(rf"{self._keyword()}{intro}(?P<value>{self.partial})\Z", re.I)


def _folded(*words: str) -> str:
    """An alternation of `words` as the folded text spells them (`privacy.normalize.fold`)."""
    return "|".join(re.escape(fold_string(w)) for w in words)


def _chars(cls: str, n: int = 40) -> str:
    """The hazard of a value written with the characters `cls`."""
    return rf"[{cls}]{{1,{n}}}"


# The same without a bare space: "is", "was", ":", "=" must say that a value follows.
_INTRO_STRICT = (
    r"(?:'s)?[ \t]*(?:(?:number|num|nummer|numero|no\.?|nr\.?|#)(?![a-z])[ \t]*)?(?:=>|[:=]|"
    + _IS_WORDS
    + r")[ \t]*"
    + _OPEN_QUOTE
)

# Values everybody writes in documentation ("the password is hunter2", "abc123"): not secrets.
_EXAMPLE_TEXT = (
    "hunter2 abc123 abcd1234 123456 1234567 12345678 123456789 password password1 password123 passw0rd "
    "p@ssw0rd changeme changeit secret secret123 qwerty qwerty123 letmein admin admin123 root toor test "
    "test123 test1234 example foobar foo123 xxxxxx 000000 111111 1234 0000 12345 s3cr3t mypassword "
    "yourpassword"
)
_EXAMPLE_VALUES = frozenset(_EXAMPLE_TEXT.split())
# A number with a unit is a size or a length, not a value: "2048 bits", "32 bytes", "8 characters".
_UNIT_AFTER = re.compile(
    r"[ \t]*(?:bits?|bytes?|kb|mb|gb|kib|mib|chars?|characters?|digits?|letters?|words?|rounds?|iterations?"
    r"|days?|hours?|minutes?|seconds?|ms|times?|long|max|min|%)(?![\w])",
    re.I,
)
# A placeholder in place of a value: "<password>", "{{ secret }}", "***", "xxxx", "...", "your_password".
_PLACEHOLDER_VALUE = re.compile(
    r"<|\{\{|\*{3}|x{4}|\.{3}|(?:your|my|the|some|any|none|null|nil|empty|redacted|changeme|n/?a)(?![a-z])", re.I
)


# Code that reads a password from somewhere is not one: "os.environ['DB_PASS']", "getenv(...)", "$VAR".
_CODE_VALUE = re.compile(
    r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*[\[(]|\$\{|\$[A-Z_][A-Z0-9_]*(?![\w!#%^&*?])|%\w+%|\w+\.\w+\.\w+"
)


def _password_ok(value: str) -> bool:
    """A password a person wrote: digits or symbols in it, not an example, a placeholder or code."""
    v = value.rstrip(".,;:!?)")
    if len(v) < 6 or v.lower() in _EXAMPLE_VALUES or _PLACEHOLDER_VALUE.match(v) or _CODE_VALUE.match(v):
        return False
    if v.isdigit():
        return len(v) <= 12  # a long digit run after "password" is an ID more often than not
    return bool(re.search(r"[\d\W_]", v)) and not re.fullmatch(r"[\d.,]+[a-z]{0,3}", v, re.I)


def _strong_password_ok(value: str) -> bool:
    """A password after a bare keyword: letters with digits and an upper-case letter or a symbol
    ("Chelsea2000!"); "password reset2" or "password hashing" are prose."""
    v = value.rstrip(".,;:)")
    return (
        _password_ok(v)
        and bool(re.search(r"[A-Za-z]", v) and re.search(r"\d", v))
        and bool(re.search(r"[A-Z]", v) or re.search(r"[^\w]", v))
        and not re.search(r"[/\\]|\.\w{2,4}\Z", v)  # a path or a file name
    )


def _plain_key_ok(value: str) -> bool:
    """A value after a bare "key": lower-case letters beyond hex with 3+ digits (a cache key or a
    digest in hex is developer text; a generated API key is not hex)."""
    return _key_ok(value) and bool(re.search(r"[g-z]", value)) and sum(c.isdigit() for c in value) >= 3


def _pin_ok(value: str) -> bool:
    digits = re.sub(r"\D", "", value)
    return digits not in _EXAMPLE_VALUES and len(set(digits)) > 1 and (len(digits) <= 8 or digits != value)


def _key_ok(value: str) -> bool:
    """A key's value: 16+ characters of hex or of lower-case letters with digits (upper-case mixed
    values are already `looks_random`); not a word, a path or a size."""
    v = value.rstrip(".,;:")
    if len(v) < 16 or v.lower() in _EXAMPLE_VALUES or len(set(v)) < 6:
        return False
    # A "0x" literal of 64 bits or less is a number in code (an LCG's multiplier, a hash's seed, a
    # mask: "SEED = 0xDEADBEEFCAFEBABE"); no key a person keeps secret is that short, and keys
    # written with "0x" (a wallet's private key, an AES key) are 32+ hex digits.
    if re.fullmatch(r"0x[0-9a-f]{1,16}", v, re.I):
        return False
    return bool(re.fullmatch(r"(?:0x)?[0-9a-f]{16,}", v, re.I)) or (
        bool(re.fullmatch(r"[a-z0-9_\-]{16,}", v)) and sum(c.isdigit() for c in v) >= 3
    )


_PASSWORD_WORDS = (
    r"(?:wi-?fi|router|door|admin|root|login|account|email|vpn|bank|master|my|the)?[ \t]*"
    r"(?:passwords?|passwd|pass[ -]?phrase|pwd|pw"
    # German, French, Spanish, Portuguese, Italian/Turkish, Dutch, Swedish, Danish/Norwegian,
    # Finnish, Polish/Czech, Hungarian, Romanian/Russian (as folded: accents dropped, "ß" is "ss").
    r"|passwort|kennwort|mot[ \t]+de[ \t]+passe|mdp|contrasena|clave|senha|palavra[ -]passe|parola(?:[ \t]+d'ordine)?"
    r"|sifre|wachtwoord|losenord(?:et)?|adgangskode(?:n)?|passord(?:et)?|salasana|haslo|heslo|jelszo|parol"
    r")"
)
# The same words in scripts that write no spaces (Japanese, Chinese, Korean) or look nothing like
# Latin (Russian, Greek, Arabic, Hebrew).
_PASSWORD_UNSPACED = _folded(
    "パスワード", "暗証番号", "密码", "密碼", "口令", "비밀번호", "암호", "пароль", "κωδικός", "كلمة المرور", "סיסמה"
)
_PIN_WORDS = (
    r"pin(?:[ -]?(?:code|nummer|nr\.?|numero|kod|kode|koodi))?|geheimzahl|(?:code|codigo|codice|numero|kod)[ \t]+pin"
    r"|(?:code|codigo|codice)[ \t]+(?:secret|secreto|segreto)|passcode|pass[ -]code"
    r"|(?:door|gate|garage|alarm|access|security|entry|entrance|lock|safe"
    r"|keypad|unlock|lockbox|building|gym|locker|bike[ -]lock|padlock|voicemail|sim|puk)"
    r"[ \t]+(?:code|pin|combo|combination)"
    r"|puk"
)
_NUMBER_WORD = "(?:" + "|".join(sorted(DIGIT_WORDS, key=len, reverse=True)) + ")"
_NUMBER_WORD_PREFIX = "(?:" + "|".join(sorted(DIGIT_WORD_PREFIXES | DIGIT_WORDS, key=len, reverse=True)) + ")"
_PIN_UNSPACED = _folded("暗証番号", "暗証コード", "pin码", "pin碼", "密码", "密碼", "핀번호", "пин-код", "пин")
_KEY_WORDS = (
    # A bounded prefix ("DD_API_KEY", "stripe-secret-key"): unbounded, "[\w-]*" scanned to the end of
    # the text after every "-" and backed up, quadratic (10 KB of "1-1-1-..." took 11.5 s a check).
    r"[\w-]{0,32}?(?:api|auth|access|secret|private|priv|signing|encryption|master|license|licence|app|client|dd|datadog)"
    r"[ _-]?keys?|privkey|apikey|api[ _-]token|secret|seed|access[ _-]token|bearer|token"
)

# National identifiers with a checksum too weak (or no shape strong enough) to find them without
# their name: 8-12 digits are counters and IDs everywhere in developer text.
_ID_RULES_SPEC: tuple[tuple[str, str, str, str], ...] = (
    # (keyword, value, stdnum module or "", partial characters)
    (r"ssn|social[ \t]+security(?:[ \t]+(?:number|no\.?|#))?|ss#", r"\d{3}[ -]?\d{2}[ -]?\d{4}", "us.ssn", r"\d -"),
    (r"cpf", r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}", "br.cpf", r"\d.\-"),
    (r"aadhaa?r(?:[ \t]+(?:card|id))?|uidai|uid", r"\d{4}[ -]?\d{4}[ -]?\d{4}", "in_.aadhaar", r"\d -"),
    (r"pan(?:[ \t]+card)?|permanent[ \t]+account", r"[a-z]{5}\d{4}[a-z]", "in_.pan", r"a-z0-9"),
    (
        r"steuer[ -]?id(?:entifikationsnummer)?|steuer[ -]?nummer|steuerliche[ \t]+identifikationsnummer"
        r"|identifikationsnummer|idnr|tin|tax[ \t]+id(?:entification)?",
        r"\d{2}[ /]?\d{3}[ /]?\d{3}[ /]?\d{3}",
        "de.idnr",
        r"\d /",
    ),
    # A taxpayer number of 11 digits is a CPF as often as a Steuer-ID: both checksums are tried.
    (
        r"taxpayer[ \t]+(?:id|number|no\.?)|tax[ \t]+(?:id|number|no\.?)|tin",
        r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}",
        "br.cpf",
        r"\d.\-",
    ),
    (r"tfn|tax[ \t]+file", r"\d{3}[ ]?\d{3}[ ]?\d{2,3}", "au.tfn", r"\d "),
    # Personal identifiers stdnum validates (a birth date and a check digit in most), by their names
    # in their countries (issue #49): a bare run of 10-13 digits is a timestamp or a counter as often.
    (r"pesel", r"\d{11}", "pl.pesel", r"\d"),
    (
        r"personnummer|personnr|personal[ \t]+identity[ \t]+number",
        r"(?:\d{2})?\d{6}[-+ ]?\d{4}",
        "se.personnummer",
        r"\d\-+ ",
    ),
    (r"hetu|henkil[oö]tunnus|personbeteckning", r"\d{6}[-+a-fu-y]\d{3}[0-9a-y]", "fi.hetu", r"\da-y\-+"),
    (
        r"rrn|resident[ \t]+registration(?:[ \t]+(?:number|no\.?))?|jumin(?:[ \t]+number)?|주민등록번호",
        r"\d{6}-?\d{7}",
        "kr.rrn",
        r"\d\-",
    ),
    (r"cpr(?:[ -]?(?:nr\.?|number|nummer))?", r"\d{6}-?\d{4}", "dk.cpr", r"\d\-"),
    (r"f[oø]dselsnummer|fnr", r"\d{6} ?\d{5}", "no.fodselsnummer", r"\d "),
    (r"rodn[eé][ \t]+[cč][ií]slo", r"\d{6}/?\d{3,4}", "cz.rc", r"\d/"),
    (r"egn|егн", r"\d{10}", "bg.egn", r"\d"),
    (r"cnp", r"\d{13}", "ro.cnp", r"\d"),
    (r"amka", r"\d{11}", "gr.amka", r"\d"),
    (r"oib", r"\d{11}", "hr.oib", r"\d"),
    (r"pps(?:[ \t]+(?:number|no\.?))?", r"\d{7}[a-w][a-iw]?", "ie.pps", r"\da-w"),
    (r"kennitala", r"\d{6}-?\d{4}", "is_.kennitala", r"\d\-"),
    (r"isikukood", r"\d{11}", "ee.ik", r"\d"),
    (r"asmens[ \t]+kodas", r"\d{11}", "lt.asmens", r"\d"),
    (r"em[sš]o", r"\d{13}", "si.emso", r"\d"),
    (r"curp", r"[a-z]{4}\d{6}[a-z]{6}[0-9a-z]\d", "mx.curp", r"a-z0-9"),
    (r"rut|run", r"\d{1,2}\.?\d{3}\.?\d{3}-?[\dk]", "cl.rut", r"\dk.\-"),
    (r"t\.?c\.?[ \t]+kimlik(?:[ \t]+no)?|tckn|kimlik[ \t]+no", r"\d{11}", "tr.tckimlik", r"\d"),
    (r"ahv(?:[ -]?nr\.?)?|avs", r"756\.?\d{4}\.?\d{4}\.?\d{2}", "ch.ssn", r"\d."),
    (
        r"rijksregisternummer|national[ \t]+number|num[eé]ro[ \t]+national",
        r"\d{2}\.?\d{2}\.?\d{2}-?\d{3}\.?\d{2}",
        "be.nn",
        r"\d.\-",
    ),
    (r"teudat[ \t]+zehut|israeli[ \t]+id", r"\d{5,9}", "il.idnr", r"\d"),
    (r"resident[ \t]+identity[ \t]+card|身份证(?:号)?|shenfenzheng", r"\d{17}[\dx]", "cn.ric", r"\dx"),
    (r"thai[ \t]+id|เลขประจำตัวประชาชน", r"\d-?\d{4}-?\d{5}-?\d{2}-?\d", "th.pin", r"\d\-"),
    (r"my[ \t]+number|individual[ \t]+number|マイナンバー", r"\d{4} ?\d{4} ?\d{4}", "jp.in_", r"\d "),
    (r"nric|mykad", r"\d{6}-?\d{2}-?\d{4}", "my.nric", r"\d\-"),
    (r"nhs(?:[ \t]+(?:number|no\.?))?", r"\d{3}[ -]?\d{3}[ -]?\d{4}", "gb.nhs", r"\d -"),
    (r"bsn|burgerservicenummer", r"\d{9}", "nl.bsn", r"\d"),
    (r"nie", r"[xyz]-?\d{7}-?[a-z]", "es.nie", r"xyz\da-z\-"),
    (r"cuit|cuil", r"\d{2}-?\d{8}-?\d", "ar.cuit", r"\d\-"),
    (r"c[eé]dula", r"\d{10}", "ec.ci", r"\d"),
    (r"south[ \t]+african[ \t]+id|sa[ \t]+id", r"\d{13}", "za.idnr", r"\d"),
    (
        r"codice[ \t]+fiscale|cf|c\.f\.",
        r"[a-z]{6}[0-9lmnpqrstuv]{2}[a-z][0-9lmnpqrstuv]{2}[a-z][0-9lmnpqrstuv]{3}[a-z]",
        "it.codicefiscale",
        r"a-z0-9",
    ),
)
_DOCUMENT_WORDS = (
    r"passport|passeport|reisepass|pasaporte|passaporto"
    r"|driver'?s?[ \t]+licen[cs]e|driving[ \t]+licen[cs]e|drivers?[ \t]+licen[cs]e"
    r"|licen[cs]e[ \t]+(?:number|no\.?|#)|dl"
    r"|f(?:ue|ü)hrerschein|permis[ \t]+de[ \t]+conduire|id[ \t]+card|identity[ \t]+card|national[ \t]+id"
    r"|personalausweis"
    r"|vin|vehicle[ \t]+identification|mrn|medical[ \t]+record|nhs|insurance[ \t]+(?:number|no\.?|id)"
    r"|member[ \t]+id|policy[ \t]+(?:number|no\.?)"
)


def _document_ok(value: str) -> bool:
    """A document number: 6-20 letters and digits (hyphens between), with a digit, not a year or a size."""
    v = value.rstrip(".,;:")
    compact = v.replace("-", "").replace(" ", "")
    if not 6 <= len(compact) <= 20 or not re.search(r"\d", compact):
        return False
    if re.fullmatch(r"(?:19|20)\d\d", compact) or v.lower() in _EXAMPLE_VALUES:
        return False
    # "expires", "photo": a word is not a number; a code has at least two digits.
    return sum(c.isdigit() for c in compact) >= 2


# Dates of birth: a date right after a birth keyword, in the languages the SDK's users write.
_MONTHS = (
    r"jan(?:uary|vier|uar|\.)?|feb(?:ruary|\.)?|f[ée]vr(?:ier|\.)?|mar(?:ch|s|\.)?|m[äa]rz|apr(?:il|\.)?|avr(?:il|\.)?"
    r"|may|mai|june?|juin|juni|july?|juil(?:let|\.)?|juli|aug(?:ust|\.)?|ao[ûu]t|sep(?:t(?:ember|embre)?|\.)?"
    r"|oct(?:ober|obre|\.)?|okt(?:ober|\.)?|nov(?:ember|embre|\.)?|dec(?:ember|\.)?|d[ée]c(?:embre|\.)?|dez(?:ember|\.)?"
    r"|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre|noviembre|diciembre"
    r"|gennaio|febbraio|aprile|maggio|giugno|luglio|settembre|ottobre|dicembre"
)
_DATE = (
    r"\d{1,2}[./-]\d{1,2}[./-](?:\d{4}|\d{2})(?![\d./-])|\d{4}[./-]\d{1,2}[./-]\d{1,2}(?![\d./-])"
    rf"|\d{{1,2}}(?:st|nd|rd|th|er|\.)?[ \t]+(?:of[ \t]+|de[ \t]+)?(?:{_MONTHS})\.?,?[ \t]+(?:de[ \t]+)?\d{{4}}"
    rf"|(?:{_MONTHS})\.?[ \t]+\d{{1,2}}(?:st|nd|rd|th)?,?[ \t]+\d{{4}}|(?:{_MONTHS})\.?[ \t]+\d{{4}}"
)
_BIRTH_WORDS = (
    r"born(?:[ \t]+(?:on|in))?|b\.|dob|d\.o\.b\.?|date[ \t]+of[ \t]+birth|birth[ \t]?date|birthday|bday|d\.?o\.?b"
    r"|geb\.|geboren(?:[ \t]+am)?|geburtsdatum|geburtstag|n[ée]e?(?:[ \t]+le)?|date[ \t]+de[ \t]+naissance"
    r"|nacid[oa](?:[ \t]+el)?|fecha[ \t]+de[ \t]+nacimiento|nat[oa](?:[ \t]+il)?|data[ \t]+di[ \t]+nascita"
)

# Bank details: a UK sort code or a US routing number, with the account number that follows it.
_ACCOUNT = (
    r"(?:[,;]?[ \t]*(?:and[ \t]+)?(?:account|acct|a/c|acc)\.?(?:[ \t]+(?:number|no\.?|#))?[ \t]*[:#]?[ \t]*\d{6,17})?"
)


# The account part of "sort code 66-04-87, account 6475..." while it is written.
_ACCOUNT_PARTIAL = (
    r"\d[\d -]{0,9}(?:[,;]?[ \t]*(?:and[ \t]+)?[a-z/]{0,7}\.?(?:[ \t]+[a-z.#]{0,6})?[ \t]*[:#]?[ \t]*\d{0,17})?"
)
_DATE_PARTIAL = (
    r"\d[\d ./-]{0,9}|\d{1,2}(?:st|nd|rd|th|er|\.)?[ \t]+(?:of[ \t]+|de[ \t]+)?[a-zé]{0,9}\.?,?[ \t]*\d{0,4}"
    r"|[a-zéû]{1,9}\.?[ \t]*\d{0,2}(?:st|nd|rd|th)?,?[ \t]*\d{0,4}"
)


# The dates code and test data put where a date must be: the Unix epoch, the ends of centuries
# and of the millennium, the last day a date type holds ("dob 1999-12-31 in fixture"). A date of
# birth is also in the past, after 1900.
_SENTINEL_YEARS = frozenset({"1900", "1970", "1999", "2000", "0001", "9999"})
_FIRST_OR_LAST_MONTH = re.compile(
    r"(?P<jan>jan(?:uary|vier|uar|\.)?|enero|gennaio)|(?P<dec>dec(?:ember|embre|\.)?|dez(?:ember|\.)?|diciembre|dicembre)"
)


def _birth_ok(value: str) -> bool:
    """A date that may be somebody's birth: not a sentinel date (1 January or 31 December of
    `_SENTINEL_YEARS`), not before 1900 or in a year to come."""
    import datetime

    year = re.search(r"(?<!\d)\d{4}(?!\d)", value)
    if year is None:
        return True  # "25.07.04": a two-digit year says nothing more
    if not 1900 <= int(year.group()) <= datetime.date.today().year:
        return False
    rest = value[: year.start()] + " " + value[year.end() :]
    numbers = sorted(int(n) for n in re.findall(r"\d{1,2}", rest))
    month = _FIRST_OR_LAST_MONTH.search(rest.lower())
    if month is not None:
        numbers = sorted([*numbers, 1 if month.group("jan") else 12])
    return not (year.group() in _SENTINEL_YEARS and numbers in ([1, 1], [12, 31]))


def _routing_ok(value: str) -> bool:
    return _stdnum_valid("us.rtn", value[:9])


def _rules() -> tuple[_Rule, ...]:
    rules = [
        _Rule(
            SECRET,
            _PASSWORD_WORDS,
            r"[^\s\"'`]{6,64}",
            _chars("^\\s\"'`", 64),
            _password_ok,
            bare=False,
            unspaced=_PASSWORD_UNSPACED,
        ),
        # Without "is" or ":" ("login with password Chelsea2000!") only a value no prose word looks like.
        _Rule(
            SECRET,
            _PASSWORD_WORDS,
            r"[^\s\"'`]{6,64}",
            _chars("^\\s\"'`", 64),
            _strong_password_ok,
            unspaced=_PASSWORD_UNSPACED,
        ),
        _Rule(SECRET, r"keys?", r"[a-z0-9]{16,}(?![\w-])", _chars(r"a-z0-9", 64), _plain_key_ok),
        _Rule(
            ADDRESS,
            r"zip(?:[ \t]?code)?|post[ \t]?code|postal[ \t]+code|plz|code[ \t]+postal",
            r"\d{5}(?:-\d{4})?(?![\w-])|[a-z]{1,2}\d[a-z\d]?[ \t]?\d[a-z]{2}(?![\w])",
            _chars(r"\w -", 10),
        ),
        _Rule(
            SECRET,
            _PIN_WORDS,
            # Also spaced out ("4 7 1 9", "47 19", "4-7-1-9", and so spelled out: "four seven one
            # nine" folds to "4 7 1 9").
            r"(?:\d(?:[ \t]\d){3,11}|\d(?:-\d){3,11}|\d\d(?:[ \t]\d\d){1,5}|\d{4,8})"
            r"(?![\w/:-]|[.,]\d)(?![ \t]+(?:release|version|build|edition|update|branch)\b)",
            # While written: digits and their separators, or a number word's first letters after
            # them (the first word of a spelled PIN is not folded to a digit until the second).
            rf"(?:(?:\d|{_NUMBER_WORD})[ \t,-]{{0,3}}){{0,11}}(?:\d|{_NUMBER_WORD_PREFIX})[ \t,-]{{0,3}}",
            _pin_ok,
            unspaced=_PIN_UNSPACED,
        ),
        _Rule(SECRET, _KEY_WORDS, r"(?:0x)?[a-z0-9_\-]{16,}(?![\w-])", _chars(r"a-z0-9_\-", 80), _key_ok),
        _Rule(
            NATIONAL_ID,
            _DOCUMENT_WORDS,
            r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])|(?<=\d) (?=\d)){5,21}(?![\w-])",
            _chars(r"a-z0-9\- ", 24),
            _document_ok,
        ),
        _Rule(NATIONAL_ID, _BIRTH_WORDS, rf"(?:{_DATE})", _DATE_PARTIAL, _birth_ok),
        _Rule(IBAN, r"sort[ \t]?code", r"\d{2}[- ]?\d{2}[- ]?\d{2}(?![\d])" + _ACCOUNT, _ACCOUNT_PARTIAL),
        _Rule(IBAN, r"routing|aba|rtn|bank[ \t]+routing", r"\d{9}(?!\d)" + _ACCOUNT, _ACCOUNT_PARTIAL, _routing_ok),
        _Rule(
            IBAN,
            r"bank[ \t]+account|account[ \t]+(?:number|no\.?|#)|acct|a/c|bank[ \t]+acc(?:oun)?t"
            r"|konto(?:nummer)?|cuenta",
            r"\d{6,17}(?![\w.,-]|[.,]\d)",
            _chars(r"\d", 17),
        ),
        # "account" alone is a test fixture's or a cloud's as often: only with "is" or ":".
        _Rule(IBAN, r"account", r"\d{6,17}(?![\w.,-]|[.,]\d)", _chars(r"\d", 17), bare=False),
    ]
    for keyword, value, module, partial in _ID_RULES_SPEC:
        rules.append(
            _Rule(
                NATIONAL_ID,
                keyword,
                value + r"(?![\w-])",
                _chars(partial, 20),
                functools.partial(lambda m, v: _stdnum_valid(m, v.upper()), module),
            )
        )
    return tuple(rules)


_ACCOUNT_NOT_BANK = re.compile(r"(?:aws|gcp|azure|cloud|service|user|github|twitter|x)[ \t]+(?:account|acct)\b", re.I)


class KeywordValueRecognizer(Detector):
    """Values a keyword announces: passwords, PINs and keys ("is", "was", ":" or a bare keyword),
    national identifiers by their name with stdnum's checksum (SSN, CPF, Aadhaar, PAN, Steuer-ID,
    TFN, codice fiscale), passport and licence numbers, dates of birth, bank account numbers."""

    RULES: tuple[_Rule, ...] = ()

    def __init__(self) -> None:
        if not KeywordValueRecognizer.RULES:
            KeywordValueRecognizer.RULES = _rules()

    def find(self, text: str) -> list[Span]:
        # On the folded text: a full-width "ｐｉｎ：４７１９", a spelled-out "four seven one nine", a
        # "contraseña" are the plain forms the rules are written for.
        f = fold(text)
        t = f.text
        out: list[Span] = []
        for rule in self.RULES:
            for m in rule.pattern.finditer(t):
                if _plain_e(f, m):
                    continue
                if rule.kind == SECRET and _UNIT_AFTER.match(t, m.end("value")):
                    continue
                if rule.kind == IBAN and _ACCOUNT_NOT_BANK.search(t, max(0, m.start() - 12), m.start("value")):
                    continue
                value = _cased(f, *m.span("value"))  # what the validators see: the case as written
                if rule.ok(value):
                    a, b = m.span("value")
                    # A sentence's full stop is not part of the value; a password's "!" or "?" may be.
                    b -= len(value) - len(value.rstrip(".,;:)" if rule.kind == SECRET else ".,;:!?)"))
                    out.append(Span(*f.span(a, b), rule.kind))
        return merge_spans(out)

    def hazard(self, text: str) -> Span | None:
        tail = text[-120:]
        offset = len(text) - len(tail)
        f = fold(tail)
        found = []
        for rule in self.RULES:
            m = rule.hazard.search(f.text)
            if m is not None and not _plain_e(f, m):
                found.append(Span(offset + f.raw_start(m.start("value")), len(text), rule.kind))
        return min(found, default=None)


def _plain_e(f: Folded, m: re.Match[str]) -> bool:
    """The rule's "is" is an "e" written without an accent: Italian "è" and Portuguese "é" fold to
    "e", a bare "e" ("password e-mailed") is not one."""
    if m.group("is") != "e":
        return False
    return f.raw[f.starts[m.start("is")]] in "eE"


def _cased(f: Folded, a: int, b: int) -> str:
    """Folded `[a, b)` with the case of the raw characters it came from (a full-width "Ｐ" is "P")."""
    out = []
    for i in range(a, b):
        c = f.text[i]
        raw = f.raw[f.starts[i] : f.ends[i]]
        out.append(c.upper() if len(raw) == 1 and raw.isupper() and c.isalpha() else c)
    return "".join(out)


# -- identifiers with a shape of their own (issue: attack 12) ---------------------------------------

# Vendor tokens detect-secrets 1.5.0 has no plugin for, and cryptocurrency addresses (an address
# is a payment identity: it links every transaction of its owner).
_SHAPED_SECRETS = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:hf_[A-Za-z]{30,40}|key-[0-9a-f]{32}|shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32}"
    r"|otpauth://[th]otp/[^\s?]*\?[^\s]*|0x[0-9a-fA-F]{40}|bc1[ac-hj-np-z02-9]{38,62}|tb1[ac-hj-np-z02-9]{38,62}"
    r"|[13][1-9A-HJ-NP-Za-km-z]{25,34})(?![A-Za-z0-9_\-])"
)
# A TOTP seed: base32 after "secret=" (an otpauth URI's parameter, or pasted alone) or after an
# authenticator keyword, also in groups of four as authenticator apps show it.
_BASE32 = r"(?-i:[A-Z2-7]{4}(?:[ ]?[A-Z2-7]{4}){3,15}=*)"  # upper case even where the keyword is not
_TOTP = re.compile(
    rf"(?:secret=|(?:totp|otp|2fa|mfa|authenticator|two[- ]factor)[\w -]{{0,20}}?(?:secret|seed|key|code)?[ \t]*"
    rf"(?:[:=]|is|was)?[ \t]*)(?P<value>{_BASE32})(?![A-Za-z0-9])",
    re.I,
)


def _shaped_secret_ok(word: str) -> bool:
    if word[0] in "13":  # a legacy Bitcoin address: base58 with its double-SHA-256 checksum
        from stdnum import bitcoin

        return bool(bitcoin.is_valid(word))
    return True


# A MAC address: six pairs with one separator throughout, or three dotted quads (Cisco).
_MAC = re.compile(
    r"(?<![\w:.\-])(?:[0-9a-f]{2}(?P<sep>[:\-])[0-9a-f]{2}(?:(?P=sep)[0-9a-f]{2}){4}|[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4})"
    r"(?![\w:\-]|\.\w)",
    re.I,
)
_MAC_HAZARD = re.compile(r"(?<![\w:.\-])[0-9a-f]{2}(?P<sep>[:\-])(?:[0-9a-f]{1,2}(?:(?P=sep)|\Z)){0,5}\Z", re.I)
# An IPv4 address written defanged, as threat reports and people hiding it from filters do.
_DEFANG_DOT = (
    r"(?:[ \t]*(?:\[\.\]|\(\.\)|\{\.\}|\[dot\]|\(dot\)|\{dot\}|<dot>)[ \t]*|[ \t]+dot[ \t]+|[ \t]+\.[ \t]+"
    r"|[ \t]*\[[ \t]*\.[ \t]*\][ \t]*)"
)
_DEFANGED_IPV4 = re.compile(
    rf"(?<![\w.])(?P<a>\d{{1,3}}){_DEFANG_DOT}(?P<b>\d{{1,3}})(?:{_DEFANG_DOT}|\.)(?P<c>\d{{1,3}})(?:{_DEFANG_DOT}|\.)"
    r"(?P<d>\d{1,3})(?![\w]|\.\d)",
    re.I,
)
_DEFANG_HAZARD = re.compile(
    r"(?<![\w.])\d{1,3}(?:(?:[ \t]*[\[({<](?:\.|d(?:o(?:t)?)?)?[\])}>]?|[ \t]+(?:d(?:o(?:t)?)?|\.)?)[ \t]*\d{0,3}"
    r"|\.\d{0,3}){1,6}\Z",
    re.I,
)
# Coordinates: decimal degrees with a degree sign or hemisphere letters, or after a location keyword;
# degrees-minutes-seconds. A pair of decimals alone is a measurement.
_DEG = r"[ \t]*(?:°|º|deg\b)?[ \t]*"
_COORD_PAIR = (
    rf"(?P<lat>[+-]?\d{{1,2}}\.\d{{2,}}){_DEG}(?P<ns>[ns](?![a-z]))?[ \t]*[,;/ ][ \t]*"
    rf"(?P<lon>[+-]?\d{{1,3}}\.\d{{2,}}){_DEG}(?P<ew>[ew](?![a-z]))?"
)
_COORDS = re.compile(rf"(?<![\w.])(?:{_COORD_PAIR})(?![\w]|\.\d)", re.I)
_COORD_KEYWORD = re.compile(
    r"(?:gps|coords?|coordinates|co-ordinates|lat(?:itude)?(?:[ /,]*lon(?:g(?:itude)?)?)?|location|position|geo"
    r"|located|home|house|live|lives|address|pin(?:ned)?|maps?|here|spot|meet|near|parked|camp|pickup|at)\b[^.\n]{0,20}\Z",
    re.I,
)
_DMS = re.compile(
    r"(?<![\w.])\d{1,3}[ \t]*°[ \t]*\d{1,2}[ \t]*['′][ \t]*(?:\d{1,2}(?:\.\d+)?[ \t]*(?:\"|″|'')?)?[ \t]*[nsew]"
    r"(?:[ \t]*,?[ \t]*\d{1,3}[ \t]*°[ \t]*\d{1,2}[ \t]*['′][ \t]*(?:\d{1,2}(?:\.\d+)?[ \t]*(?:\"|″|'')?)?"
    r"[ \t]*[nsew])?",
    re.I,
)
# A list's first number ("1." at a line's start or after a colon) may open a numbered seed phrase.
_NUMBERING_HAZARD = re.compile(r"(?:\A|(?<=[\n:]))[ \t]*1[.)]?[ \t]*\Z")
# Degrees, minutes and seconds while written: from the degree sign on ("11°03'49.9"S 167°0").
_DMS_HAZARD = re.compile(r"(?<![\w.])\d{1,3}[ \t]*°[\d \t'′\".″,°nsew]{0,30}\Z", re.I)
_COORD_HAZARD = re.compile(
    # Every part may be the last one written so far: "26.1214°", "26.1214° S,", "26.1214° S, 52.8".
    r"(?<![\w.])[+-]?\d{1,3}\.\d*(?:[ \t]*(?:°|º)?(?:[ \t]*[nsew](?![a-z]))?(?:[ \t]*[,;/ ][ \t]*[+-]?\d{0,3}(?:\.\d*)?"
    r"(?:[ \t]*(?:°|º)?(?:[ \t]*[nsew](?![a-z]))?)?)?)?[ \t]*\Z",
    re.I,
)


def _coords_ok(text: str, m: re.Match[str]) -> bool:
    lat, lon = float(m.group("lat")), float(m.group("lon"))
    if abs(lat) > 90 or abs(lon) > 180:
        return False
    marked = "°" in m.group() or "º" in m.group() or m.group("ns") or m.group("ew") or "deg" in m.group().lower()
    return bool(marked) or bool(_COORD_KEYWORD.search(text[max(0, m.start() - 60) : m.start()]))


# Phone numbers the national patterns leave out: ten North American digits in one run, a wa.me
# link's number, a tel: link without "+".
_NANP_RUN = re.compile(r"(?<![\w.+\-/])(?:\+?1)?(?P<n>[2-9]\d{2}[2-9]\d{6})(?![\w\-/]|[.,]\d)")
_PHONE_LINKS = re.compile(
    r"(?:wa\.me/|whatsapp\.com/send\?phone=|tel:|callto:|sms:|viber://chat\?number=)\+?(?P<n>\d{6,15})\b", re.I
)
_PHONE_LINK_HAZARD = re.compile(r"(?:wa\.me/|tel:|callto:|sms:|phone=|number=)\+?\d*\Z", re.I)
_NANP_CONTEXT_NOT = re.compile(
    r"(?:id|#|no\.?|number|order|ticket|issue|pr|commit|build|run|job|ts|timestamp|epoch|size|bytes)[ \t:=#]*\Z", re.I
)


def _nanp_ok(text: str, m: re.Match[str]) -> bool:
    n = m.group("n")
    # N11 area codes and exchanges are service codes; 555-01xx numbers are fiction's.
    if n[1:3] == "11" or n[4:6] == "11" or len(set(n)) < 4:
        return False
    before = text[max(0, m.start() - 16) : m.start()]
    if _NANP_CONTEXT_NOT.search(before) and not re.search(r"phone|cell|call|tel|mobile|text|sms|fax", before, re.I):
        return False
    # The numbering plan's rules, not libphonenumber's list of assigned area codes: an area code
    # opened next year, or one the list lags behind, is still a number someone wrote.
    return n[1] != "9" and not (n[3:6] == "555" and n[6:8] == "01")


def _link_phone_ok(n: str) -> bool:
    # A wa.me or tel: link holds nothing but a phone number: its length is the only check.
    return 7 <= len(n) <= 15


# Postal addresses the street patterns miss: a P.O. box, a street name before its number
# ("Quayside Street 196, Unit 8B").
_PO_BOX = re.compile(
    r"(?<![\w])(?:p\.?[ \t]?o\.?[ \t]?box|post(?:al)?[ \t]+office[ \t]+box|postfach|apartado(?:[ \t]+de[ \t]+correos)?"
    r"|bo[iî]te[ \t]+postale|casella[ \t]+postale|private[ \t]+bag|gpo[ \t]+box|locked[ \t]+bag)"
    r"[ \t]*(?:no\.?|#)?[ \t]*\d{1,7}\b"
    r"(?:,[ \t]*[A-Z][\w'-]+(?:[ \t]+[A-Z][\w'-]+)?)?(?:,?[ \t]*[A-Z]{2}[ \t]+\d{5}(?:-\d{4})?)?",
    re.I,
)
_PO_BOX_HAZARD = re.compile(
    r"(?<![\w])(?:p\.(?:[ \t]?o\.?(?:[ \t]?b(?:o(?:x)?)?)?)?|po[ \t]?b(?:o(?:x)?)?|postfach)"
    r"(?:[ \t]*(?:no\.?|#)?[ \t]*\d*)?\Z",
    re.I,
)
_STREET_WORDS = (
    r"Street|St\.|Avenue|Ave\.?|Road|Rd\.?|Boulevard|Blvd\.?|Lane|Drive|Court|Place|Terrace|Way|Square|Parkway"
    r"|Highway|Crescent|Close|Circle|Trail|Row|Gardens|Grove|Mews|Alley|Plaza|Quay|Wharf|Walk|Hill|Rise|Green"
)
_STREET_NUMBER = re.compile(
    rf"(?<![\w])(?:[A-Z][a-z'-]+[ \t]+){{1,3}}(?:{_STREET_WORDS})[ \t]+\d{{1,5}}[a-zA-Z]?(?![\w.]|\.\d)"
    r"(?:,?[ \t]*(?i:unit|apt\.?|apartment|flat|suite|ste\.?|floor|fl\.?|#)[ \t]*\w{1,5})?"
    r"(?:,[ \t]*[A-Z][\w'-]+(?:[ \t]+[A-Z][\w'-]+)?)?"
)
# A street's name is held once a street word follows it, and from its first letter where a
# phrase announces an address ("I live at Q..."): its first words would go up before the number.
_STREET_NUMBER_HAZARD = re.compile(
    rf"(?<![\w])[A-Z][a-z'-]+[ \t]+(?:{_STREET_WORDS})(?:[ \t]+\d{{0,5}}[a-zA-Z]?)?[ \t]*\Z"
    r"|(?<=(?i:live|ives|ving|oved|ress|ated|ying|stay) (?i:at|on|to|is) )(?:[A-Z][a-z'-]*[ \t]*){1,3}\Z"
    r"|(?<=(?i:address): )(?:[A-Z][a-z'-]*[ \t]*){1,3}\Z"
)
# "Wall Street 2", "Main Street 10 minutes": a street's name that is a famous place or prose.
_STREET_NOT = re.compile(
    r"(?:Wall|Easy|Sesame|Main|Fleet|Downing)[ \t]+Street[ \t]+\d{1,5}[ \t]+(?:minutes|years|times)", re.I
)
# An IBAN written with dots between its groups (the space and hyphen forms are `privacy.pii`'s).
_IBAN_DOTTED = re.compile(r"(?<![\w.])[a-z]{2}\d{2}(?:\.[a-z0-9]{4}){2,7}(?:\.[a-z0-9]{1,3})?(?![\w]|\.\w)", re.I)
_IBAN_DOTTED_HAZARD = re.compile(r"(?<![\w.])[a-z]{2}\d{2}(?:\.[a-z0-9]{0,4}){1,8}\Z", re.I)


class ShapeRecognizer(Detector):
    """Identifiers with a shape of their own that the pattern detectors did not know: more vendor
    tokens, TOTP seeds, cryptocurrency addresses, MAC addresses, coordinates, defanged IPv4
    addresses, ten-digit North American numbers and phone links, P.O. boxes, streets written
    before their number, dotted IBANs, national identifiers whose format or checksum is specific
    enough without their name (CPF, Aadhaar in groups, PAN, codice fiscale, Steuer-ID in groups)."""

    def find(self, text: str) -> list[Span]:
        out: list[Span] = []
        out += [Span(*m.span(), SECRET) for m in _SHAPED_SECRETS.finditer(text) if _shaped_secret_ok(m.group())]
        out += [Span(*m.span("value"), SECRET) for m in _TOTP.finditer(text)]
        out += [Span(*m.span(), SECRET) for m in _WEBHOOK.finditer(text)]
        out += [Span(*m.span(), IP) for m in _MAC.finditer(text) if _mac_ok(m.group())]
        for m in _DEFANGED_IPV4.finditer(text):
            octets = [int(m.group(k)) for k in "abcd"]
            if all(o <= 255 for o in octets) and not all(o < 10 for o in octets):
                out.append(Span(*m.span(), IP))
        out += [Span(*m.span(), ADDRESS) for m in _COORDS.finditer(text) if _coords_ok(text, m)]
        out += [Span(*m.span(), ADDRESS) for m in _DMS.finditer(text)]
        out += [Span(*m.span(), PHONE) for m in _NANP_RUN.finditer(text) if _nanp_ok(text, m)]
        out += [Span(*m.span(), PHONE) for m in _PHONE_LINKS.finditer(text) if _link_phone_ok(m.group("n"))]
        out += [Span(*m.span(), ADDRESS) for m in _PO_BOX.finditer(text)]
        out += [Span(*m.span(), ADDRESS) for m in _STREET_NUMBER.finditer(text) if not _STREET_NOT.match(m.group())]
        out += [Span(*m.span(), IBAN) for m in _IBAN_DOTTED.finditer(text) if _iban_dotted_ok(m.group())]
        for pattern, module in _SHAPED_IDS:
            out += [
                Span(*m.span(), NATIONAL_ID) for m in pattern.finditer(text) if _stdnum_valid(module, m.group().upper())
            ]
        return merge_spans(out)

    def hazard(self, text: str) -> Span | None:
        tail = text[-96:]
        offset = len(text) - len(tail)
        found = []
        for pattern in (
            _MAC_HAZARD,
            _DEFANG_HAZARD,
            _PHONE_LINK_HAZARD,
            _PO_BOX_HAZARD,
            _STREET_NUMBER_HAZARD,
            _IBAN_DOTTED_HAZARD,
            _SHAPED_SECRET_HAZARD,
            _COORD_HAZARD,
            _NUMBERING_HAZARD,
            _DMS_HAZARD,
        ):
            m = pattern.search(tail)
            if m is not None:
                found.append(Span(offset + m.start(), len(text), SECRET))
        totp = _totp_hazard(tail)
        if totp is not None:
            found.append(Span(offset + totp, len(text), SECRET))
        # After a location keyword even a number's first digits may start a coordinate ("GPS 26").
        m = re.search(r"(?<![\w.])[+-]?\d{1,3}\Z", tail)
        if m is not None and _COORD_KEYWORD.search(tail, max(0, m.start() - 40), m.start()):
            found.append(Span(offset + m.start(), len(text), ADDRESS))
        w = _webhook_hazard(tail)
        if w is not None:
            found.append(Span(offset + w, len(text), SECRET))
        return min(found, default=None)


def _mac_ok(mac: str) -> bool:
    digits = re.sub(r"[^0-9a-f]", "", mac.lower())
    # All zeros and broadcast are placeholders; a MAC has some variety (a hex dump row does not look like one).
    if digits in ("000000000000", "ffffffffffff") or len(set(digits)) <= 2:
        return False
    # Documentation's examples: every pair a doubled digit ("aa:bb:cc:dd:ee:ff", "11:22:33:44:55:66"),
    # the hex digits counting up or down ("01:23:45:67:89:ab"), and the range IANA reserves for
    # documentation (00:00:5e:00:53:xx, RFC 7042). A vendor's address is none of these by chance
    # (one in 2^24 at most).
    pairs = [digits[i : i + 2] for i in range(0, 12, 2)]
    steps = {int(b, 16) - int(a, 16) for a, b in itertools.pairwise(digits)}
    return not (all(p[0] == p[1] for p in pairs) or steps in ({1}, {-1}) or digits.startswith("00005e0053"))


def _iban_dotted_ok(raw: str) -> bool:
    from specsteer.privacy.pii import _iban_length

    return _iban_length(raw.replace(".", " ")) == len(raw)


# Identifiers specific enough by shape and checksum: a CPF written with its dots and dash, an
# Aadhaar in its three groups of four (Verhoeff), a PAN (its fourth letter is the holder's type),
# a codice fiscale (16 characters, check letter), a Steuer-ID in its 2-3-3-3 groups.
_SHAPED_IDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![\w.\-])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\w\-]|\.\d)"), "br.cpf"),
    (re.compile(r"(?<![\w.\-])[2-9]\d{3}[ -]\d{4}[ -]\d{4}(?![\w\-]|[.,]\d|[ -]\d)"), "in_.aadhaar"),
    (re.compile(r"(?<![\w])[A-Z]{3}[PCHFATBLJG][A-Z]\d{4}[A-Z](?![\w])"), "in_.pan"),
    (
        re.compile(
            r"(?<![\w])[A-Z]{6}[0-9LMNPQRSTUV]{2}[ABCDEHLMPRST][0-9LMNPQRSTUV]{2}[A-Z][0-9LMNPQRSTUV]{3}[A-Z](?![\w])",
            re.I,
        ),
        "it.codicefiscale",
    ),
    (re.compile(r"(?<![\w.\-])\d{2} \d{3} \d{3} \d{3}(?![\w\-]|[.,]\d| \d)"), "de.idnr"),
    # A birth date, a separator and a check digit (issue #49): a Swedish personnummer (its "-" or
    # "+" after the date), a Danish CPR, a Finnish HETU (its century letter), a Korean RRN.
    (re.compile(r"(?<![\w.\-+])(?:19|20)?\d{6}[-+]\d{4}(?![\w\-]|[.,]\d)"), "se.personnummer"),
    (re.compile(r"(?<![\w.\-+])\d{6}-\d{4}(?![\w\-]|[.,]\d)"), "dk.cpr"),
    (re.compile(r"(?<![\w.\-+])\d{6}[-+A-FU-Y]\d{3}[0-9A-Y](?![\w\-])", re.I), "fi.hetu"),
    (re.compile(r"(?<![\w.\-+])\d{6}-\d{7}(?![\w\-]|[.,]\d)"), "kr.rrn"),
    # A Belgian national number as it is printed: "85.07.30-033.28".
    (re.compile(r"(?<![\w.\-+])\d{2}\.\d{2}\.\d{2}-\d{3}\.\d{2}(?![\w\-]|[.,]\d)"), "be.nn"),
)
# A TOTP seed while written: base32 in up to sixteen groups of 1-4 characters (one space apart at
# most) at the very end, after its keyword. Written as one pattern, `[A-Z2-7]{1,4}(?: ?[A-Z2-7]{1,4}){0,15}\Z`,
# the engine tries every way to split a run of base32 into groups before it gives up: minutes on
# "2FA: <40 base32 letters> ok" (found by the TypeScript port's parity run). `_totp_hazard` finds
# the same start without the splitting.
_TOTP_KEYWORD = (
    r"(?:totp|otp|2fa|mfa|authenticator|two[- ]factor)[\w -]{0,20}?(?:secret|seed|key|code)?[ \t]*"
    r"(?:[:=]|is|was)?[ \t]*"
)
_BASE32_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


@functools.lru_cache(maxsize=64)
def _totp_value(n: int) -> re.Pattern[str]:
    return re.compile(_TOTP_KEYWORD + rf"(?P<value>(?-i:[A-Z2-7][A-Z2-7 ]{{0,{n}}}))\Z", re.I)


def _totp_hazard(tail: str) -> int | None:
    """Where a TOTP seed being written starts in `tail` (its value), or None.

    A value is a suffix that splits into at most 16 groups (a word of n base32 characters takes
    ceil(n / 4) of them, words one space apart), so the suffixes that qualify are those starting at
    a base32 character at or after `first`, the smallest such start: a pattern whose value is "a
    base32 character, then base32 characters or spaces to the end, at most as many as after
    `first`" accepts the same starts one way each, and its keyword part backtracks as before."""
    first = None
    groups = word = 0
    for i in range(len(tail), 0, -1):
        c = tail[i - 1]
        if c in _BASE32_CHARS:
            word += 1
            if groups + -(-word // 4) > 16:
                break
            first = i - 1
        elif c == " " and word > 0 and i >= 2 and tail[i - 2] in _BASE32_CHARS:
            groups += -(-word // 4)
            word = 0
        else:
            break
    if first is None:
        return None
    m = _totp_value(len(tail) - first - 1).search(tail)
    return None if m is None else m.start("value")


# Webhook URLs carry their secret in the path: the URL is held from its scheme while its host may
# still become one of these.
_WEBHOOK_HOSTS = (
    "hooks.slack.com/",
    "discord.com/api/webhooks/",
    "discordapp.com/api/webhooks/",
    "outlook.office.com/webhook",
)
_WEBHOOK = re.compile(
    r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/[\w/\-]+|discord(?:app)?\.com/api/webhooks/[\w/\-]+)",
)


def _webhook_hazard(tail: str) -> int | None:
    m = re.search(r"https?://(\S*)\Z", tail)
    if m is None:
        return None
    rest = m.group(1)
    if any(h.startswith(rest) or rest.startswith(h) for h in _WEBHOOK_HOSTS):
        return m.start()
    return None


_SHAPED_SECRET_HAZARD = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:hf_[A-Za-z]*|key-[0-9a-f]*|shp(?:at|ss|ca|pa)_[0-9a-fA-F]*|otpauth:\S*|0x[0-9a-fA-F]{8,}"
    r"|bc1[ac-hj-np-z02-9]*|secret=[A-Za-z2-7]*)\Z"
)


# -- wallet seed phrases (issue: attack 12) --------------------------------------------------------

# A BIP-39 mnemonic is a wallet's private key in words: 12 to 24 words of its 2048-word English list
# in a row, whatever separates them (spaces, commas, hyphens, line breaks, "1." numbering) and in
# any case. The list is the `mnemonic` package's (the reference implementation's, Trezor/SatoshiLabs).
_SEED_WORD = re.compile(r"[A-Za-z]+")
# What may stand between two words of one phrase: no letters, a little punctuation, a number
# ("1." numbering); a full stop after a word ends a sentence, not a phrase.
_SEED_GAP = re.compile(r"(?:[\s,;\-_/|:()\[\]#*]|\d{1,2}\.?){1,8}")
# Separators prose does not put between single words: commas, hyphens, line breaks, numbering.
_SEED_LIST_GAP = re.compile(r"[,:\-\n\d|/]")
_SEED_WORDS_MIN = 12
_SEED_CONTEXT = re.compile(
    r"(?:seed|mnemonic|recovery|phrase|words?|backup|wallet|ledger|metamask|trezor)\W{0,6}\Z", re.I
)


@functools.lru_cache(maxsize=1)
def _bip39_words() -> tuple[frozenset[str], tuple[str, ...]]:
    from mnemonic import Mnemonic

    words = tuple(sorted(Mnemonic("english").wordlist))
    return frozenset(words), words


def _seed_runs(text: str) -> Iterator[tuple[int, int, int]]:
    """Runs of BIP-39 words separated by `_SEED_GAP`: (start, end, number of words)."""
    words, _ = _bip39_words()
    start = end = count = 0
    for m in _SEED_WORD.finditer(text):
        w = m.group().lower()
        joined = count > 0 and _SEED_GAP.fullmatch(text, end, m.start()) is not None
        if w in words:
            if joined:
                end, count = m.end(), count + 1
                continue
            if count:
                yield start, end, count
            start, end, count = m.start(), m.end(), 1
        else:
            if count:
                yield start, end, count
            count = 0
    if count:
        yield start, end, count


def _numbered_from(text: str, a: int) -> int:
    """The start of a phrase's first word, or of the "1." that numbers it."""
    m = re.search(r"(?<![\w.])\d{1,2}[.)][ \t]*\Z", text[max(0, a - 6) : a])
    return a - len(m.group()) if m else a


class SeedPhraseRecognizer(Detector):
    """Wallet seed phrases: 12 or more BIP-39 words in a row (see above)."""

    def find(self, text: str) -> list[Span]:
        return [Span(_numbered_from(text, a), b, SECRET) for a, b, n in _seed_runs(text) if n >= _SEED_WORDS_MIN]

    def hazard(self, text: str) -> Span | None:
        # The trailing run of list words (its last word may be half written) may still reach 12.
        tail = text[-400:]
        offset = len(text) - len(tail)
        words, ordered = _bip39_words()
        m = re.search(r"[A-Za-z]+\Z", tail)
        end, partial = len(tail), False
        if m is not None and m.group().lower() not in words:
            import bisect

            w = m.group().lower()
            i = bisect.bisect_left(ordered, w)
            if i == len(ordered) or not ordered[i].startswith(w):
                return None
            end, partial = m.start(), True
        runs = list(_seed_runs(tail[:end]))
        # The last run counts if only separators follow it (", ", " 2. ", a line break).
        if runs and (runs[-1][1] == end or _SEED_GAP.fullmatch(tail, runs[-1][1], end)):
            a, n = runs[-1][0], runs[-1][2] + partial
        elif partial and m is not None:
            a, n = m.start(), 1
        else:
            return None
        # Prose has pairs of list words ("fix now"), so words separated by spaces are held from three
        # on; two where the separators are a list's; one where a keyword or numbering announced it.
        listed = _SEED_LIST_GAP.search(tail, a, len(tail)) is not None
        before = tail[:a]
        if n >= 3 or (n == 2 and listed) or _SEED_CONTEXT.search(before) or re.search(r"(?:\n|\d[.)]\s*)\Z", before):
            return Span(offset + _numbered_from(tail, a), len(text), SECRET)
        return None
