"""Recognition by the libraries made for each kind, behind the guard's own streaming (issue 30).

The guard decides per round, on a growing text, where a span may still be forming (`hazard`); no
library streams, so that part stays ours. What a complete span *is* comes from well-kept
libraries wherever one exists:

* phone numbers: libphonenumber (`phonenumbers.PhoneNumberMatcher`, leniency POSSIBLE: an unassigned
  range is still a number someone wrote) over every
  region's numbering plan for numbers written with a country code ("+44 ...", "(+44) ...",
  "+(31) ...", "0044 ..."), also where a line break or spaces split the groups; national
  numbers without a country code stay with `privacy.pii`'s patterns (run for every region, the
  matcher finds timestamps, IP addresses and version numbers that are valid numbers somewhere);
* payment cards: `stdnum.luhn` with the card lengths, in groups separated by spaces, hyphens,
  dots or line breaks;
* national identifiers where a checksum or a fixed shape makes them cheap to tell apart:
  US SSN, Spanish DNI, Dutch BSN, French NIR, Canadian SIN (`stdnum`), UK NINO (its shape);
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
import re
from collections.abc import Iterable, Iterator
from typing import Any

from privacy.normalize import fold
from privacy.spans import CARD, EMAIL, NATIONAL_ID, PHONE, SECRET, Detector, Span, merge_spans

__all__ = [
    "CardRecognizer",
    "NationalIdRecognizer",
    "PhoneRecognizer",
    "SecretRecognizer",
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
            from privacy.pii import PiiDetector

            out += [Span(*f.span(*view.span(s.start, s.end)), PHONE) for s in PiiDetector([PHONE]).find(view.text)]
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
        m = _PHONE_HAZARD.search(fold(text[-64:]).text)
        if m is None:
            return None
        start = len(text) - len(text[-64:]) + fold(text[-64:]).raw_start(m.start())
        return Span(start, len(text), PHONE)


_PHONE_HAZARD = re.compile(
    r"(?<![\w+])(?:\(\s*\+?|\+\s*\(?)\d[\d\s().\-/]{0,24}\Z|(?<![\w+])\(?00\d[\d\s().\-/]{0,24}\Z"
)


# -- payment cards ----------------------------------------------------------------------------------

_CARD_CANDIDATE = re.compile(r"(?<![\w.,-])\d(?:(?:[ .\-]{1,3}|[ ]*\n[ ]*)?\d){12,18}(?![\w-]|[.,]\d)")
_CARD_PREFIX = re.compile(r"4|5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720|3[47]|3(?:0[0-5]|[68])|35|6011|64[4-9]|65|62")


def _card_ok(raw: str) -> bool:
    from stdnum import luhn

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

    return bool(importlib.import_module(f"stdnum.{module}").is_valid(value))


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
    if len(w) < 16 or _HEX_ONLY.fullmatch(w):
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
            # "password: required.", "token: see below": a word (and its full stop) is not a value.
            value = m.group("value").rstrip(".!?:)")
            if re.search(r"[\d\W_]", value) or (value != value.lower() and value != value.capitalize()):
                yield m.span("value")
    for m in _PRIVATE_KEY.finditer(text):
        end = _KEY_END.search(text, m.end())
        yield m.end(), end.start() if end else len(text)
    for m in _WORD.finditer(text):
        # A URL's path or a dotted name splits into its parts; a token does not.
        for part in re.finditer(_PATH_PART if _PATHLIKE.search(m.group()) else _PART, m.group()):
            if looks_random(part.group()):
                yield m.start() + part.start(), m.start() + part.end()


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
        if value is not None:
            return Span(len(text) - len(text[-200:]) + value.start("value"), len(text), SECRET)
        # A trailing word that already reads as generated may still grow into a key (also across
        # a line break: the next line may go on with it).
        tail = text[-200:]
        view = unwrapped(tail)
        m: re.Match[str] | None = _TRAILING_WORD.search(view.text)
        if m and _PATHLIKE.search(m.group()):
            m = re.search(r"[A-Za-z0-9+=_\-.]+\Z", view.text)
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
        from privacy.pii import PiiDetector

        return [Span(*view.span(s.start, s.end), EMAIL) for s in PiiDetector([EMAIL]).find(view.text)]

    def hazard(self, text: str) -> Span | None:
        tail = text[-160:]
        view = unwrapped(tail)
        if view.text == tail:
            return None
        from privacy.pii import PiiDetector

        h = PiiDetector([EMAIL]).hazard(view.text)
        return None if h is None else Span(len(text) - len(tail) + view.raw(h.start), len(text), EMAIL)
