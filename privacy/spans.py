"""What every egress-guard detector shares: the kinds of span, `Span`, the `Detector` interface,
the slice of a tokenizer the guard uses, and how overlapping spans merge.

The detectors (`privacy.pii`, `privacy.canaries`, `privacy.ngrams`) and the guard that composes
them (`privacy.guard`) build on this module only, never on each other's internals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ADDRESS",
    "CANARY",
    "CARD",
    "EMAIL",
    "IBAN",
    "IP",
    "KINDS",
    "NAME",
    "NATIONAL_ID",
    "PHONE",
    "PRIVATE_NGRAM",
    "SECRET",
    "SPECIAL_CATEGORY",
    "URL_CREDENTIALS",
    "Detector",
    "Span",
    "Tokenizer",
    "check_ids",
    "clean_text",
    "decode",
    "merge_spans",
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
SECRET = "secret"  # a key, token or password: a vendor pattern, a keyword's value, a random word, the history's
NATIONAL_ID = "national-id"
# GDPR Art. 9 data: health, sexual life, religion, political opinion, ethnicity, union (`privacy.special`)
SPECIAL_CATEGORY = "special-category"

# Every kind, the most specific first: when spans of different kinds overlap, the merged span is
# named after the most specific one. Detectors merge their own findings too, so the order lives
# here rather than with the guard.
KINDS = (
    CANARY,
    CARD,
    IBAN,
    NATIONAL_ID,
    URL_CREDENTIALS,
    SECRET,
    EMAIL,
    PHONE,
    IP,
    ADDRESS,
    SPECIAL_CATEGORY,
    NAME,
    PRIVATE_NGRAM,
)


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
        """Text of `token_ids`; the guard decodes the way `sdk.decoding.Specialist.decode` does.

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


def merge_spans(spans: Iterable[Span]) -> list[Span]:
    """Spans sorted, overlapping ones merged into one named after the most specific kind (`KINDS`)."""
    out: list[Span] = []
    for s in sorted(spans):
        if out and s.start < out[-1].end:
            last = out[-1]
            kind = min(last.kind, s.kind, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))
            out[-1] = Span(last.start, max(last.end, s.end), kind)
        else:
            out.append(s)
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD. JSON accepts an escaped lone surrogate
    ("\\ud800") and Python keeps it in a `str`, but neither a fast tokenizer nor UTF-8 can take
    one: a profile, prompt or canary that carries one crashed the guard at build time."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def check_ids(tokenizer: Tokenizer, ids: Sequence[int]) -> None:
    """Refuse token IDs outside the tokenizer's vocabulary (a caller's error, `ValueError`).

    A negative ID overflowed the Rust decoder, and one past the vocabulary decoded to "" and so
    passed every detector while the wire carried it: the guard fails closed on both instead."""
    if not ids:
        return
    try:
        size: int | None = len(tokenizer)  # type: ignore[arg-type]  # added tokens included
    except TypeError:
        size = None
    lo, hi = min(ids), max(ids)
    if lo < 0 or (size is not None and hi >= size):
        bad = lo if lo < 0 else hi
        limit = "" if size is None else f" of {size} IDs"
        raise ValueError(f"token ID {bad} is outside the tokenizer's vocabulary{limit}")


def decode(tokenizer: Tokenizer, ids: list[int]) -> str:
    """The text of `ids` exactly as the device shows it (`sdk.decoding.Specialist.decode`); an ID
    outside the vocabulary is refused (`check_ids`)."""
    if not ids:
        return ""
    check_ids(tokenizer, ids)
    # A fast tokenizer's Rust backend decodes exactly as `decode(..., clean_up_tokenization_spaces=False)`
    # does, without the Python-side conversions that dominate the guard's cost.
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.decode(ids, skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
