"""The user's private history on the device: loading it, retrieving from it, and fitting it into the
Specialist's context.

Nothing in this module talks to the network. A `Profile` is what the on-device Specialist may read;
the cloud Generalist never sees it. Commit trailers (``Signed-off-by: Name <email>`` and friends) are
dropped from the entries at load time: they hold names and email addresses, not writing style, so
they never reach the Specialist's context. The names and emails in them are kept apart, as
`Profile.identities`, for one use: the egress guard keeps them out of the uplink.

The file format (JSON, JSONL, a dataset user object; sealed or not) is parsed by
`privacy.profile_format`, which `privacy seal` shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import bm25s
import numpy as np

from specsteer.core.errors import ConfigError
from specsteer.core.prompts import ENTRY_SEP, HEADER_GAP, SUBJECT_PREFIX, Example
from specsteer.privacy.profile_format import ProfileData, ProfileEntry, parse_profile_obj, read_profile
from specsteer.privacy.vault import KeyProvider

__all__ = ["Profile", "ProfileEntry", "ProfileIndex", "demo_profile_path", "fit_context"]

# Shared by indexing and querying: both sides must tokenize identically or terms never match.
_STOPWORDS = "en"

_TRIM_MARK = "…"
# Below this many characters a trimmed body carries no usable style signal, so fewer, longer
# examples beat many stubs.
_MIN_BODY_CHARS = 120
# Cutting at a line break reads best, but not if it throws away more than this share of the budget.
_LINE_CUT_MIN_FRACTION = 0.6


@dataclass(frozen=True)
class Profile:
    """A user's private history, in file order (the dataset stores it oldest first)."""

    user_id: str | None
    entries: tuple[ProfileEntry, ...]
    # Names and emails from the entries' trailers ({string: kind}), for the egress guard only.
    identities: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_file(cls, path: str | Path, *, key_provider: KeyProvider | None = None) -> Profile:
        """Load a profile file; any problem raises `ProfileError` with a one-sentence message.

        A file sealed with `privacy seal` (AES-GCM) is decrypted in memory with `key_provider`, or
        by default with `$SPECSTEER_VAULT_KEY` / `$SPECSTEER_VAULT_PASSPHRASE`; its plaintext is
        never written anywhere.
        """
        return cls.from_data(read_profile(path, key_provider=key_provider))

    @classmethod
    def from_obj(cls, obj: object, *, source: str = "<profile>") -> Profile:
        """Build a profile from already-parsed JSON; `source` names it in error messages."""
        return cls.from_data(parse_profile_obj(obj, source=source))

    @classmethod
    def from_data(cls, data: ProfileData) -> Profile:
        """The profile of one user that `privacy.profile_format.read_users` read from a file."""
        return cls(user_id=data.user_id, entries=data.entries, identities=data.identities)


class ProfileIndex:
    """BM25 (bm25s, Lucene variant) over each entry's subject and body.

    Tokenization is bm25s's: lowercase, words of two or more characters, English stopwords removed,
    no stemming. Ranking is by score, ties broken by position in the profile (earlier first), so the
    result is fully deterministic. A query with no indexed terms (empty, all stopwords, or only
    unseen words) scores every entry 0 and therefore returns the first `n` entries in profile order.
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        texts = [f"{e.subject}\n{e.body}" for e in profile.entries]
        self._retriever: bm25s.BM25 | None = None
        if texts:
            corpus_tokens = bm25s.tokenize(
                texts, lower=True, stopwords=_STOPWORDS, return_ids=False, show_progress=False
            )
            # bm25s cannot build an index with an empty vocabulary; every score is 0 then anyway.
            if any(corpus_tokens):
                retriever = bm25s.BM25()
                retriever.index(corpus_tokens, show_progress=False)
                self._retriever = retriever

    def retrieve(self, query: str, n: int = 3) -> list[ProfileEntry]:
        """The `n` entries most relevant to `query`, best first (all of them if `n` exceeds the size)."""
        if not isinstance(query, str):
            raise ConfigError(f"The retrieval query must be a string, not {type(query).__name__}.")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"The number of entries to retrieve must be a non-negative integer, not {n!r}.")
        entries = self.profile.entries
        if n == 0 or not entries:
            return []
        scores = self._scores(query)
        order = sorted(range(len(entries)), key=lambda i: (-float(scores[i]), i))
        return [entries[i] for i in order[:n]]

    def _scores(self, query: str) -> np.ndarray:
        zeros = np.zeros(len(self.profile.entries), dtype=np.float64)
        if self._retriever is None:
            return zeros
        query_tokens = bm25s.tokenize(query, lower=True, stopwords=_STOPWORDS, return_ids=False, show_progress=False)[0]
        token_ids = self._retriever.get_tokens_ids(query_tokens)
        if not token_ids:
            return zeros
        return np.asarray(self._retriever.get_scores_from_ids(token_ids), dtype=np.float64)


def fit_context(entries: Sequence[ProfileEntry], *, max_chars: int = 1800) -> list[Example]:
    """The retrieved entries as the Specialist's examples, whose text layout (`core.prompts.context_text`)
    is never longer than `max_chars`.

    Entries keep their given order (best first). When the bodies do not fit, the budget is shared
    so short bodies stay whole and long ones are cut evenly, at a line break or word boundary,
    ending with "…". Trailing entries are dropped rather than shrunk below a useful size; if not
    even one subject line fits, there are no examples.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise ConfigError(f"max_chars must be a positive integer, not {max_chars!r}.")
    subjects = [" ".join(e.subject.split()) for e in entries]
    # Blank lines at the edges of a body would only break the layout; inner spacing is style.
    bodies = [e.body.strip("\n").rstrip() for e in entries]

    def fixed_cost(k: int) -> int:
        return sum(len(SUBJECT_PREFIX) + len(s) + len(HEADER_GAP) for s in subjects[:k]) + (k - 1) * len(ENTRY_SEP)

    k = len(entries)
    while k > 0 and fixed_cost(k) > max_chars:
        k -= 1
    if k == 0:
        return []
    caps = _share_budget([len(b) for b in bodies[:k]], max_chars - fixed_cost(k))
    while k > 1 and any(cap < min(len(b), _MIN_BODY_CHARS) for cap, b in zip(caps, bodies, strict=False)):
        k -= 1
        caps = _share_budget([len(b) for b in bodies[:k]], max_chars - fixed_cost(k))
    return [Example(s, _trim(b, cap)) for s, b, cap in zip(subjects[:k], bodies[:k], caps, strict=True)]


def _share_budget(lengths: list[int], budget: int) -> list[int]:
    """Water-filling: every length gets min(length, c) with the largest c whose total fits `budget`."""
    caps = [0] * len(lengths)
    remaining = max(budget, 0)
    # Shortest first, so what a short body leaves unused flows to the longer ones.
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    for pos, i in enumerate(order):
        share = remaining // (len(order) - pos)
        caps[i] = min(lengths[i], share)
        remaining -= caps[i]
    return caps


def _trim(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, preferring a line break, then a word boundary."""
    if len(text) <= limit:
        return text
    budget = limit - len(_TRIM_MARK)
    if budget <= 0:
        return ""
    # Look one character past the budget: a cut right before whitespace is already at a boundary.
    window = text[: budget + 1]
    cut = window.rfind("\n")
    if cut < math.ceil(budget * _LINE_CUT_MIN_FRACTION):
        cut = max(window.rfind(" "), window.rfind("\t"))
    if cut <= 0:
        # One unbroken token longer than the budget: a mid-word cut is the only way to stay in limits.
        cut = budget
    head = text[:cut].rstrip()
    return head + _TRIM_MARK if head else ""


def demo_profile_path() -> Path:
    """The demo user's profile shipped with the SDK (`sdk demo`, and `federation run` without --data)."""
    return Path(str(resources.files("sdk").joinpath("data/demo_profile.json")))
