"""The egress guard: finds sensitive spans in a draft before it leaves the device.

Pure: no I/O, no network, no logging of the text it sees. Three detectors, one guard:

* `PiiDetector` - personal-data patterns (emails, phone numbers, payment cards with a Luhn check,
  IPv4/IPv6 addresses, URLs carrying credentials, IBANs with the mod-97 check).
* `VerbatimNgramDetector` - runs of `n` or more Specialist tokens (default 8) that occur in the
  user's private history and not in the public prompt. The history's n-gram hashes are kept in a
  sorted array, so indexing 300 profile entries is one batched tokenizer call and some numpy.
* `CanaryDetector` - registered strings: planted canaries, and the user's own identities (names
  and emails from commit trailers, which the dataset's profiles carry).

`EgressGuard.inspect(committed_text, draft_text)` returns the sensitive spans that touch the draft,
including spans that begin in already-committed text and continue into the draft.
`EgressGuard.check(committed_ids, new_ids, tokenizer)` returns a `GuardVerdict` saying where to
cut the tokens about to go up, and what to put in their place.

Why "holds" exist. A span that is only *complete* in the next round would otherwise leak its
prefix now: "john.doe@example.c" goes up in round i (not yet an email: one-letter TLD), the final
"om" is blocked in round i+1, and the cloud already has the address. So every detector also
reports a *hazard*: the earliest offset from which the end of the text could still grow into a
span ("...@exam", "+1 415 55", "4111 1111", a prefix of a registered name). A hazard cuts the
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from core.session_types import GuardDecision

__all__ = [
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
}

# When spans of different kinds overlap, the merged span is named after the most specific kind.
_PRIORITY = (CANARY, CARD, IBAN, URL_CREDENTIALS, EMAIL, PHONE, IP, NAME, PRIVATE_NGRAM)


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
# Personal-data patterns
# ----------------------------------------------------------------------------------------------

# File extensions that follow an '@' in build artifacts and retina images ("gcc@13--13.2.0.bottle.tar.gz",
# "icon@2x.png"). None is an IANA top-level domain, so skipping them loses no real address.
_EXTENSIONS = (
    "gz tgz bz2 xz zst lz tar txt log json yaml yml toml cfg ini png jpg jpeg gif svg webp bmp ico patch "
    "diff orig rej lock bak tmp swp exe dll dylib cc cpp cxx hpp hh pyc obj"
)
_NOT_TLDS = frozenset(_EXTENSIONS.split())

_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+-])"
    r"[A-Za-z0-9._%+-]{1,64}"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
    r"([A-Za-z]{2,24})"
    r"(?![A-Za-z0-9-])"
)
# "+44 20 7946 0958", "+1 (415) 555-0132", "+4930123456": a country code that does not start with 0
# (which rules out "+0.01" in benchmark tables), then digit groups with single separators.
_PHONE_INTL_RE = re.compile(r"(?<![\w+.])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?!\d|[.-]\d)")
# North American "(415) 555-0132", "415-555-0132", "415.555.0132"; dates (4-2-2) never fit 3-3-4.
_PHONE_NANP_RE = re.compile(r"(?<![\w.+-])(?:\(\d{3}\)[ ]?|\d{3}[-. ])\d{3}[-. ]\d{4}(?![\w-]|\.\d)")
# European national "030 1234567", "020 7946 0958", "0171-1234567": a trunk 0, no slashes (dates).
_PHONE_NATIONAL_RE = re.compile(r"(?<![\w.+-])0\d{1,4}[ -]\d{3,8}(?:[ -]\d{2,4})?(?![\w-]|\.\d)")
_CARD_RE = re.compile(r"(?<![\w.,-])\d(?:[ -]?\d){12,18}(?![\w-]|[.,]\d)")
_IPV4_RE = re.compile(
    r"(?<![\w.-])((?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))(?![\w-]|\.\d)"
)
# Version strings that happen to have four numeric parts ("Git 1.8.0.3", "version 2.39.2.1").
_VERSION_CONTEXT = re.compile(r"(?i)(?:\bgit|\bversion|\brelease|\bv|\bsection|§|\bc\d\d)\s*$")
_IPV6_RE = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:%[A-Za-z0-9]+)?(?![\w:])")
_URL_CREDENTIALS_RE = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,15}://"
    r"(?:[^\s/?#@:]+:[^\s/?#@]+|[A-Za-z0-9_-]{20,})@[^\s/?#]+"
)
_IBAN_RE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])")

# Hazards: the end of the text could still grow into one of the patterns above.
_HAZARD_TAIL = 96
_EMAIL_HAZARD = re.compile(r"(?:[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]*|<[A-Za-z0-9._%+-]*)\Z")
_DIGITS_HAZARD = re.compile(r"(?<![\w.,])(?:\+|\()?\d[\d .()-]{0,24}\Z")
_IPV6_HAZARD = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{0,4}){1,7}\Z")
_URL_HAZARD = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s/?#@]*\Z")
_IBAN_HAZARD = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}[A-Z0-9 ]{0,30}\Z")

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
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _card_ok(raw: str) -> bool:
    digits = re.sub(r"[ -]", "", raw)
    if not 13 <= len(digits) <= 19 or not _CARD_PREFIX.match(digits) or not luhn_ok(digits):
        return False
    seps = set(re.findall(r"[ -]", raw))
    if not seps:
        return True
    # Typed or printed card numbers use one separator in fixed groups (4-4-4-4, Amex 4-6-5);
    # "1 2 3 4 ..." or mixed separators are tables of numbers, not a card.
    if len(seps) > 1:
        return False
    groups = [len(g) for g in re.split(r"[ -]", raw)]
    return (groups[:-1] == [4] * (len(groups) - 1) and 1 <= groups[-1] <= 4) or groups in ([4, 6, 5], [4, 6, 4])


def _phone_ok(raw: str, *, lo: int, hi: int) -> bool:
    digits = sum(ch.isdigit() for ch in raw)
    return lo <= digits <= hi and raw.count("(") == raw.count(")")


class PiiDetector(Detector):
    """Personal-data patterns with validators that keep version numbers, dates and hashes out.

    Decisions on tricky inputs (tested in tests/privacy/test_detectors.py):

    * emails need a dotted domain with an alphabetic TLD of 2+ letters: `HEAD@{1}`, `a@b.c`
      (C macros), `user@localhost` are not emails; `git@github.com` and mailing-list Message-IDs
      (`<2024...@gmail.com>`) are, because they are address-shaped and often personal.
      Build artifacts (`gcc@13--13.2.0.bottle.tar.gz`, `icon@2x.png`) are not: their "TLD" is a file type.
    * phones need a `+` country code, the 3-3-4 North American shape, or a national trunk `0`
      and 9-11 digits; plain digit runs (timestamps, counts), dates, times and versions never match.
    * cards need 13-19 digits, a known issuer prefix, the Luhn check and consistent grouping.
    * IPv4 addresses exclude loopback/unspecified/broadcast, all-single-digit quads (C99 section
      "6.3.1.8", versions "1.8.0.3") and numbers right after "git", "version", "v", "section".
    * IPv6 addresses must parse, contain a decimal digit (C++ `a::b` does not) and not be loopback.
    * URL credentials: `scheme://user:password@host` or a token-like user of 20+ characters.
    """

    KINDS = (EMAIL, PHONE, CARD, IP, URL_CREDENTIALS, IBAN)

    def __init__(self, kinds: Iterable[str] | None = None) -> None:
        chosen = tuple(self.KINDS if kinds is None else kinds)
        unknown = sorted(set(chosen) - set(self.KINDS))
        if unknown:
            raise ValueError(f"unknown personal-data kind(s): {', '.join(unknown)}")
        self.kinds = frozenset(chosen)

    def find(self, text: str) -> list[Span]:
        out: list[Span] = []
        k = self.kinds
        if EMAIL in k:
            out += [Span(m.start(), m.end(), EMAIL) for m in _EMAIL_RE.finditer(text) if _tld_ok(m.group(1))]
        if URL_CREDENTIALS in k:
            out += [Span(m.start(), m.end(), URL_CREDENTIALS) for m in _URL_CREDENTIALS_RE.finditer(text)]
        if PHONE in k:
            out += [
                Span(m.start(), m.end(), PHONE)
                for m in _PHONE_INTL_RE.finditer(text)
                if _phone_ok(m.group(), lo=8, hi=15)
            ]
            out += [Span(m.start(), m.end(), PHONE) for m in _PHONE_NANP_RE.finditer(text)]
            out += [
                Span(m.start(), m.end(), PHONE)
                for m in _PHONE_NATIONAL_RE.finditer(text)
                if _phone_ok(m.group(), lo=9, hi=11)
            ]
        if CARD in k:
            out += [Span(m.start(), m.end(), CARD) for m in _CARD_RE.finditer(text) if _card_ok(m.group())]
        if IP in k:
            out += [Span(m.start(1), m.end(1), IP) for m in _IPV4_RE.finditer(text) if _ipv4_ok(text, m)]
            out += [Span(m.start(), m.end(), IP) for m in _IPV6_RE.finditer(text) if _ipv6_ok(m.group())]
        if IBAN in k:
            out += [
                Span(m.start(), m.end(), IBAN) for m in _IBAN_RE.finditer(text) if _iban_ok(m.group().replace(" ", ""))
            ]
        # "+1 (415) 555-0132" is also a North American "(415) 555-0132": one finding, not two.
        return _merge(out)

    def hazard(self, text: str) -> Span | None:
        offset = max(0, len(text) - _HAZARD_TAIL)
        tail = text[offset:]
        found: list[Span] = []
        k = self.kinds

        def add(pattern: re.Pattern[str], kind: str, ok: bool = True) -> None:
            m = pattern.search(tail)
            if m and ok:
                found.append(Span(offset + m.start(), len(text), kind))

        if EMAIL in k:
            add(_EMAIL_HAZARD, EMAIL)
        if URL_CREDENTIALS in k:
            add(_URL_HAZARD, URL_CREDENTIALS)
        if k & {PHONE, CARD, IP}:
            m = _DIGITS_HAZARD.search(tail)
            # Three digits can still become a phone, card or address; "+" or "(" announce a phone.
            if m and (sum(c.isdigit() for c in m.group()) >= 3 or m.group()[0] in "+("):
                kind = PHONE if PHONE in k else CARD if CARD in k else IP
                found.append(Span(offset + m.start(), len(text), kind))
        if IP in k:
            m = _IPV6_HAZARD.search(tail)
            if m and any(c.isdigit() for c in m.group()):
                found.append(Span(offset + m.start(), len(text), IP))
        if IBAN in k:
            add(_IBAN_HAZARD, IBAN)
        return min(found, default=None)


def _tld_ok(tld: str) -> bool:
    return tld.lower() not in _NOT_TLDS


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
    # lower(), not casefold(): the regex matches with IGNORECASE, which does not expand "ß" to "ss".
    return " ".join(text.split()).lower()


class CanaryDetector(Detector):
    """Registered strings, matched case-insensitively with any whitespace between words.

    `min_prefix` is the shortest prefix (in characters, starting at a word) that makes the end of
    a text a hazard: shorter prefixes ("Te" of "Test User") would hold at nearly every word.
    """

    def __init__(self, strings: Mapping[str, str] | Iterable[str], *, min_prefix: int = 4) -> None:
        items = strings.items() if isinstance(strings, Mapping) else ((s, CANARY) for s in strings)
        self.strings: dict[str, str] = {}
        for s, kind in items:
            if kind not in PLACEHOLDERS:
                raise ValueError(f"unknown kind {kind!r} for a registered string")
            if s.strip():
                self.strings[_normalize(s)] = kind
        self.min_prefix = min_prefix
        self._regex = self._compile()
        self._prefixes: dict[str, str] = {}
        for norm, kind in self.strings.items():
            for n in range(min(min_prefix, len(norm)), len(norm)):
                self._prefixes.setdefault(norm[:n], kind)
        self._max_len = max((len(s) for s in self.strings), default=0)

    def _compile(self) -> re.Pattern[str] | None:
        if not self.strings:
            return None
        parts = []
        for norm in sorted(self.strings, key=len, reverse=True):
            body = r"\s+".join(re.escape(w) for w in norm.split(" "))
            # Word boundaries only where the string itself starts or ends with a word character,
            # so "user.one@example.invalid" still matches inside "<user.one@example.invalid>".
            left = r"(?<!\w)" if norm[0].isalnum() or norm[0] == "_" else ""
            right = r"(?!\w)" if norm[-1].isalnum() or norm[-1] == "_" else ""
            parts.append(f"{left}{body}{right}")
        return re.compile("|".join(parts), re.IGNORECASE)

    def find(self, text: str) -> list[Span]:
        if self._regex is None:
            return []
        return [
            Span(m.start(), m.end(), self.strings.get(_normalize(m.group()), CANARY))
            for m in self._regex.finditer(text)
        ]

    def hazard(self, text: str) -> Span | None:
        if not self._prefixes:
            return None
        offset = max(0, len(text) - 2 * self._max_len)
        tail = text[offset:]
        for m in re.finditer(r"(?<!\w)\w|(?<=\s)[^\w\s]|^[^\w\s]", tail):
            candidate = _normalize(tail[m.start() :])
            # A trailing space is kept: "test user " is still a prefix of "test user one".
            if tail.endswith((" ", "\n", "\t")) and candidate:
                candidate += " "
            kind = self._prefixes.get(candidate)
            if kind is not None:
                return Span(offset + m.start(), len(text), kind)
        return None


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
    """

    def __init__(self, history_hashes: np.ndarray, tokenizer: Tokenizer, n: int, exclude: np.ndarray | None = None):
        if n < 2:
            raise ValueError(f"a verbatim n-gram needs n >= 2 tokens; got {n}")
        self.n = n
        self.tokenizer = tokenizer
        hashes = np.unique(np.asarray(history_hashes, dtype=np.uint64))
        if exclude is not None and exclude.size:
            hashes = hashes[~_contains(np.unique(exclude), hashes)]
        self.hashes = hashes

    @classmethod
    def from_texts(
        cls, history: Iterable[str], tokenizer: Tokenizer, *, n: int = 8, public_texts: Iterable[str] = ()
    ) -> VerbatimNgramDetector:
        """Index the private history (e.g. each entry's subject and body) once per device."""
        hashes = _hashes_of_many(_encode_all(tokenizer, history), n)
        exclude = _hashes_of_many(_encode_all(tokenizer, public_texts), n)
        return cls(hashes, tokenizer, n, exclude)

    def for_prompt(self, prompt: str) -> VerbatimNgramDetector:
        exclude = _window_hashes(_encode_all(self.tokenizer, [prompt])[0], self.n)
        return VerbatimNgramDetector(self.hashes, self.tokenizer, self.n, exclude)

    def __len__(self) -> int:
        return int(self.hashes.size)

    def find_ids(self, ids: Sequence[int]) -> list[tuple[int, int]]:
        """Maximal runs `[a, b)` of token positions covered by private n-grams."""
        hits = _contains(self.hashes, _window_hashes(ids, self.n))
        runs: list[tuple[int, int]] = []
        for i in np.flatnonzero(hits).tolist():
            if runs and i <= runs[-1][1]:
                runs[-1] = (runs[-1][0], i + self.n)
            else:
                runs.append((i, i + self.n))
        return runs

    def find(self, text: str) -> list[Span]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)  # type: ignore[operator]
        offsets = enc["offset_mapping"]
        return [Span(offsets[a][0], offsets[b - 1][1], PRIVATE_NGRAM) for a, b in self.find_ids(enc["input_ids"])]


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
        registered: dict[str, str] = dict(identities or {})
        registered.update({c: CANARY for c in canaries})
        detectors: list[Detector] = [
            PiiDetector(),
            VerbatimNgramDetector.from_texts(history, tokenizer, n=n, public_texts=public_texts),
        ]
        if registered:
            detectors.append(CanaryDetector(registered))
        return cls(tuple(detectors), policy)

    def for_prompt(self, prompt: str) -> EgressGuard:
        """The guard for one session: n-grams of the public prompt are not private."""
        return replace(self, detectors=tuple(d.for_prompt(prompt) for d in self.detectors))

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
        found = [h for d in self.detectors if (h := d.hazard(window)) is not None]
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
        text, offs = token_offsets(tokenizer, ctx, new)
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
            i = _first_touching(offs, s)
            if i is not None and (cut is None or i < cut):
                cut, chosen = i, s
        hold = False
        if hazard is not None:
            i = _first_touching(offs, hazard)
            if i is not None and (cut is None or i < cut):
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
    whole (a token splits a multi-byte character), the offset falls back to the common prefix,
    which only widens the token's range: the guard errs toward cutting.
    """
    ids = list(context) + list(new)
    full = _decode(tokenizer, ids)
    offs: list[int] = []
    for i in range(len(new) + 1):
        prefix = _decode(tokenizer, ids[: len(context) + i]) if i < len(new) else full
        offs.append(_common_prefix(prefix, full))
    for i in range(len(offs) - 2, -1, -1):
        offs[i] = min(offs[i], offs[i + 1])
    return full, offs


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


def _first_touching(offs: list[int], span: Span) -> int | None:
    """The first new token whose characters overlap `span` (a span before all new tokens touches none)."""
    for i in range(len(offs) - 1):
        a, b = offs[i], offs[i + 1]
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
