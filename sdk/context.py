"""The user's private history on the device: loading it, retrieving from it, and rendering it.

Nothing in this module talks to the network. A `Profile` is what the on-device Specialist may read;
the cloud Generalist never sees it. Commit trailers (``Signed-off-by: Name <email>`` and friends) are
dropped from the entries at load time: they hold names and email addresses, not writing style, so
they never reach the Specialist's context. The names and emails in them are kept apart, as
`Profile.identities`, for one use: the egress guard keeps them out of the uplink.

Accepted profile files (see `Profile.from_file`):

* a JSON user object as in the dataset: ``{"user_id": ..., "profile": [...], "queries": [...]}``
  (``queries`` is ignored), or ``{"entries": [...]}``;
* a JSON list of entries;
* a ``.jsonl`` / ``.ndjson`` file with one entry per line (or a single line holding a user object).

Each entry is an object with a non-empty string ``subject`` and a string ``body``; ``time`` (string or
number) is optional, ``trailers`` and any unknown keys are ignored.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import bm25s
import numpy as np

from core.errors import ConfigError, ProfileError
from privacy.detectors import identities_from_trailers
from privacy.vault import (
    ENV_KEY,
    ENV_PASSPHRASE,
    EnvKeyProvider,
    KeyProvider,
    PassphraseKeyProvider,
    ProfileVault,
    VaultError,
    is_vault,
)

__all__ = ["Profile", "ProfileEntry", "ProfileIndex", "render_context"]

_JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})

# Shared by indexing and querying: both sides must tokenize identically or terms never match.
_STOPWORDS = "en"

# render_context layout. The separator is a Markdown rule so a small LM sees clear entry boundaries.
_SUBJECT_PREFIX = "Subject: "
_HEADER_GAP = "\n\n"
_ENTRY_SEP = "\n\n---\n\n"
_TRIM_MARK = "…"
# Below this many characters a trimmed body carries no usable style signal, so fewer, longer
# examples beat many stubs.
_MIN_BODY_CHARS = 120
# Cutting at a line break reads best, but not if it throws away more than this share of the budget.
_LINE_CUT_MIN_FRACTION = 0.6


@dataclass(frozen=True)
class ProfileEntry:
    """One past piece of the user's writing (a commit: subject line and body).

    Trailers are deliberately not kept: they are names and emails, not style.
    `time` is kept as text; numeric dataset timestamps (Unix seconds) become their decimal string.
    """

    subject: str
    body: str
    time: str | None = None


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
        p = Path(path)
        source = str(p)
        if is_vault(p):
            try:
                raw = ProfileVault.open(p, key_provider or _default_key_provider())
            except VaultError as exc:
                raise ProfileError(f"Cannot read profile {source}: {exc}.") from None
            return cls._from_text(raw, source, jsonl=None)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            raise ProfileError(f"Cannot read profile {source}: the file does not exist.") from None
        except IsADirectoryError:
            raise ProfileError(f"Cannot read profile {source}: it is a directory, not a file.") from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ProfileError(f"Cannot read profile {source}: {reason}.") from None
        return cls._from_text(raw, source, jsonl=p.suffix.lower() in _JSONL_SUFFIXES)

    @classmethod
    def _from_text(cls, raw: bytes, source: str, *, jsonl: bool | None) -> Profile:
        """Parse file bytes; `jsonl=None` (a sealed file has no telling suffix) tries JSON, then JSONL."""

        try:
            # utf-8-sig: editors on Windows often prepend a BOM, which is still valid UTF-8 text.
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ProfileError(
                f"Cannot read profile {source}: it is not UTF-8 text (invalid byte at offset {exc.start})."
            ) from None

        if not text.strip():
            raise ProfileError(f"Cannot read profile {source}: the file is empty.")

        if jsonl:
            return cls._from_jsonl(text, source)
        if jsonl is None:
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                return cls._from_jsonl(text, source)
            return cls.from_obj(obj, source=source)

        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            hint = ""
            if exc.msg == "Extra data":
                hint = " (a file with one JSON object per line must be named .jsonl)"
            raise ProfileError(
                f"Cannot read profile {source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}{hint}."
            ) from None
        except RecursionError:
            raise ProfileError(f"Cannot read profile {source}: the JSON nests too deeply.") from None
        return cls.from_obj(obj, source=source)

    @classmethod
    def from_obj(cls, obj: object, *, source: str = "<profile>") -> Profile:
        """Build a profile from already-parsed JSON; `source` names it in error messages."""
        user_id: str | None = None
        if isinstance(obj, dict):
            user_id = _parse_user_id(obj, source)
            key = "profile" if "profile" in obj else "entries" if "entries" in obj else None
            if key is None:
                raise ProfileError(f'Cannot read profile {source}: the JSON object has no "profile" or "entries" list.')
            items = obj[key]
            if not isinstance(items, list):
                raise ProfileError(
                    f'Cannot read profile {source}: "{key}" must be a list of entries, not {_json_type(items)}.'
                )
            label = f"{key}[{{}}]"
        elif isinstance(obj, list):
            items = obj
            label = "entry [{}]"
        else:
            raise ProfileError(
                f'Cannot read profile {source}: expected a JSON object with a "profile" list or a JSON '
                f"list of entries, not {_json_type(obj)}."
            )
        entries = tuple(_parse_entry(item, source, label.format(i)) for i, item in enumerate(items))
        return cls(user_id=user_id, entries=entries, identities=_identities(items))

    @classmethod
    def _from_jsonl(cls, text: str, source: str) -> Profile:
        parsed: list[tuple[int, object]] = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                parsed.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ProfileError(
                    f"Cannot read profile {source}: line {lineno} is not valid JSON (column {exc.colno}: {exc.msg})."
                ) from None
            except RecursionError:
                raise ProfileError(f"Cannot read profile {source}: line {lineno} nests JSON too deeply.") from None

        # `head -1 dataset.jsonl > me.jsonl` is the obvious way to pull one user out of the dataset,
        # so a single user-object line is accepted; several would make the choice of user ambiguous.
        first = parsed[0][1]
        if len(parsed) == 1 and isinstance(first, dict) and "profile" in first:
            return cls.from_obj(first, source=source)
        entries: list[ProfileEntry] = []
        for lineno, item in parsed:
            if isinstance(item, dict) and "profile" in item and "subject" not in item:
                raise ProfileError(
                    f"Cannot read profile {source}: line {lineno} is a whole user object, but a .jsonl "
                    f"profile with several lines must hold one entry per line."
                )
            entries.append(_parse_entry(item, source, f"line {lineno}"))
        return cls(user_id=None, entries=tuple(entries), identities=_identities([item for _, item in parsed]))


def _identities(items: list[object]) -> dict[str, str]:
    """Names and emails in the entries' `trailers` lists (malformed trailers are skipped: they are optional)."""
    lines = [
        t
        for item in items
        if isinstance(item, dict) and isinstance(item.get("trailers"), list)
        for t in item["trailers"]
        if isinstance(t, str)
    ]
    return identities_from_trailers(lines)


def _default_key_provider() -> KeyProvider:
    if os.environ.get(ENV_KEY):
        return EnvKeyProvider()
    passphrase = os.environ.get(ENV_PASSPHRASE)
    if not passphrase:
        raise ProfileError(f"the profile is encrypted: set {ENV_PASSPHRASE} (or {ENV_KEY}) to open it")
    return PassphraseKeyProvider(passphrase)


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


def render_context(entries: Sequence[ProfileEntry], *, max_chars: int = 1800) -> str:
    """Format retrieved entries as the Specialist's context, never longer than `max_chars`.

    Each entry becomes ``Subject: <subject>`` + blank line + body; entries are separated by a
    ``---`` line and keep their given order (best first). When the bodies do not fit, the budget is
    shared so short bodies stay whole and long ones are cut evenly, at a line break or word boundary,
    ending with "…". Trailing entries are dropped rather than shrunk below a useful size.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars <= 0:
        raise ConfigError(f"max_chars must be a positive integer, not {max_chars!r}.")
    if not entries:
        return ""

    headers = [_SUBJECT_PREFIX + " ".join(e.subject.split()) for e in entries]
    # Blank lines at the edges of a body would only break the layout; inner spacing is style.
    bodies = [e.body.strip("\n").rstrip() for e in entries]

    def fixed_cost(k: int) -> int:
        return sum(len(h) + len(_HEADER_GAP) for h in headers[:k]) + (k - 1) * len(_ENTRY_SEP)

    k = len(entries)
    while k > 0 and fixed_cost(k) > max_chars:
        k -= 1
    if k == 0:
        # Not even one subject line fits: give what fits of the best one rather than nothing.
        return _trim(headers[0], max_chars)

    caps = _share_budget([len(b) for b in bodies[:k]], max_chars - fixed_cost(k))
    while k > 1 and any(cap < min(len(b), _MIN_BODY_CHARS) for cap, b in zip(caps, bodies, strict=False)):
        k -= 1
        caps = _share_budget([len(b) for b in bodies[:k]], max_chars - fixed_cost(k))

    blocks: list[str] = []
    for header, body, cap in zip(headers[:k], bodies[:k], caps, strict=True):
        trimmed = _trim(body, cap)
        blocks.append(f"{header}{_HEADER_GAP}{trimmed}" if trimmed else header)
    return _ENTRY_SEP.join(blocks)


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


def _parse_user_id(obj: dict[str, object], source: str) -> str | None:
    user_id = obj.get("user_id")
    if user_id is None or isinstance(user_id, str):
        return user_id
    raise ProfileError(f'Cannot read profile {source}: "user_id" must be a string, not {_json_type(user_id)}.')


def _parse_entry(item: object, source: str, where: str) -> ProfileEntry:
    prefix = f"Cannot read profile {source}: {where}"
    if not isinstance(item, dict):
        raise ProfileError(f"{prefix} must be a JSON object with a subject and body, not {_json_type(item)}.")

    if "subject" not in item:
        raise ProfileError(f'{prefix} has no "subject".')
    subject = item["subject"]
    if not isinstance(subject, str):
        raise ProfileError(f'{prefix} has a "subject" that is {_json_type(subject)}, not a string.')
    if not subject.strip():
        raise ProfileError(f'{prefix} has an empty "subject".')

    if "body" not in item:
        raise ProfileError(f'{prefix} has no "body" (use "" for a subject-only entry).')
    body = item["body"]
    if not isinstance(body, str):
        raise ProfileError(f'{prefix} has a "body" that is {_json_type(body)}, not a string.')

    return ProfileEntry(subject=subject.strip(), body=body, time=_parse_time(item.get("time"), prefix))


def _parse_time(value: object, prefix: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    # The dataset stores Unix seconds as JSON integers; keep them as their exact decimal text.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    raise ProfileError(f'{prefix} has a "time" that is {_json_type(value)}, not a string or number.')


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for messages a non-Python user can read."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
