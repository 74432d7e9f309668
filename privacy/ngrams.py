"""Verbatim private n-grams: runs of Specialist tokens that copy a passage of the user's private
history and are not in the public prompt (`VerbatimNgramDetector`).

The history's n-gram hashes (a rolling polynomial hash, vectorized with numpy) are kept in a
sorted array, so indexing 300 profile entries is one batched tokenizer call and some numpy.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from importlib import resources

import numpy as np

from specsteer.privacy.spans import PRIVATE_NGRAM, Detector, Span, Tokenizer, clean_text, decode

__all__ = [
    "RewrittenVerbatimDetector",
    "VerbatimNgramDetector",
    "function_words",
    "is_code_name",
    "names_code_only",
    "prose_words",
    "run_words",
    "without_code_names",
]

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
    return _prefix_hashes_of_many(sequences, n, [n])[n]


def _prefix_hashes_of_many(sequences: Sequence[Sequence[int]], n: int, lengths: Iterable[int]) -> dict[int, np.ndarray]:
    """For each length `j` <= `n`, the hash of the first `j` ids of every window `_hashes_of_many`
    keeps for `n`, in the same order (so a prefix stays paired with its n-gram)."""
    sizes = np.array([len(s) for s in sequences], dtype=np.int64)
    if not sizes.size or sizes.sum() < n:
        return {j: np.zeros(0, dtype=np.uint64) for j in lengths}
    flat = np.concatenate([np.asarray(s, dtype=np.uint64) for s in sequences])
    which = np.repeat(np.arange(sizes.size), sizes)
    count = flat.size - n + 1
    keep = which[:count] == which[n - 1 :]
    return {j: _window_hashes(flat, j)[:count][keep] for j in lengths}


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

    Hazard: without one, a copy's first `n - 1` tokens went up before the n-gram was complete
    (about a fifth of a copied sentence). So the trailing `hazard_tokens`+ tokens of a text that
    are the start of a private n-gram (one the prompt does not hold) are held: the device drafts
    on locally, and the hold ends when the copy diverges (the trailing tokens no longer start
    one), turns into a span, or the text ends. `prefix_hashes` pairs each history hash with the
    hashes of its first `j` tokens, `hazard_tokens <= j < n` (`from_texts` computes them).
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
        prefix_hashes: dict[int, np.ndarray] | None = None,
        hazard_tokens: int = 4,
    ):
        if n < 2:
            raise ValueError(f"a verbatim n-gram needs n >= 2 tokens; got {n}")
        if min_words < 0:
            raise ValueError(f"min_words must be >= 0; got {min_words}")
        self.n = n
        self.tokenizer = tokenizer
        self.min_words = min_words
        self.long_run = 2 * n if long_run is None else max(long_run, n)
        self.hazard_tokens = hazard_tokens
        history_hashes = np.asarray(history_hashes, dtype=np.uint64)
        hashes, first = np.unique(history_hashes, return_index=True)
        prefixes = {j: np.asarray(p, dtype=np.uint64)[first] for j, p in (prefix_hashes or {}).items()}
        if exclude is not None and exclude.size:
            keep = ~_contains(np.unique(exclude), hashes)
            hashes = hashes[keep]
            prefixes = {j: p[keep] for j, p in prefixes.items()}
        self.hashes = hashes
        # Paired with `hashes` (for `for_prompt`, which drops the prompt's n-grams from both).
        self._paired = prefixes
        # Only n-grams of `min_words`+ words, or their run could never be a passage anyway.
        self._prefix_sets = {j: np.unique(p) for j, p in prefixes.items() if j >= hazard_tokens}

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
        hazard_tokens: int = 4,
    ) -> VerbatimNgramDetector:
        """Index the private history (e.g. each entry's subject and body) once per device."""
        history = list(history)
        # An entry's first word has no space before it and so other tokens than the same word
        # inside a sentence (" Diagnosed" is not "Di" + "agnosed"): a copy that opens a draft's
        # sentence matched only from its second word. The opening with a space is indexed too.
        # Only its first windows differ (the tokens realign after the first word), and only where
        # the space joins the word (a tokenizer whose space is a token of its own needs none).
        encoded = _encode_all(tokenizer, history)
        texts = [t for t in history if t]
        openings = _encode_all(tokenizer, [" " + t.lstrip()[: 24 * n] for t in texts])
        encoded += [o[: n + 2] for o, e in zip(openings, encoded, strict=False) if o and o[1 : n + 2] != e[: n + 1]]
        hashes = _hashes_of_many(encoded, n)
        prefixes = _prefix_hashes_of_many(encoded, n, range(max(1, hazard_tokens), n)) if hazard_tokens else {}
        exclude = _hashes_of_many(_encode_all(tokenizer, public_texts), n)
        return cls(
            hashes,
            tokenizer,
            n,
            exclude,
            min_words=min_words,
            long_run=long_run,
            prefix_hashes=prefixes,
            hazard_tokens=hazard_tokens,
        )

    def for_prompt(self, prompt: str) -> VerbatimNgramDetector:
        # With a space before it too, as the history's openings are indexed (`from_texts`).
        exclude = _hashes_of_many(_encode_all(self.tokenizer, [prompt, " " + prompt.lstrip()]), self.n)
        return VerbatimNgramDetector(
            self.hashes,
            self.tokenizer,
            self.n,
            exclude,
            min_words=self.min_words,
            long_run=self.long_run,
            prefix_hashes=self._paired,
            hazard_tokens=self.hazard_tokens,
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
        if self.min_words == 0:
            return True
        return self.is_passage_text(decode(self.tokenizer, [int(t) for t in ids[a:b]]), b - a)

    def is_passage_text(self, text: str, tokens: int) -> bool:
        """Whether a run of `tokens` tokens reading `text` copies a passage of the user's own words:
        `min_words` words but names of code (and, where it names code, function words:
        `prose_words`), or `long_run` tokens of anything but names of code (issue #49 finding 8: "between
        `files_ref_store` and `packed_ref_store`" repeats the codebase's names, not the user)."""
        if self.min_words == 0:
            return True
        if prose_words(text) >= self.min_words:
            return True
        if tokens < self.long_run:
            return False
        rest = without_code_names(text)
        # Only the names' tokens are discounted: a long copy of digits or prose is still one.
        return rest == text or len(self.tokenizer.encode(rest, add_special_tokens=False)) >= self.long_run

    def find(self, text: str) -> list[Span]:
        # Same length: a lone surrogate becomes U+FFFD, so the offsets still index `text`.
        enc = self.tokenizer(clean_text(text), add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        return [Span(offsets[a][0], offsets[b - 1][1], PRIVATE_NGRAM) for a, b in self.find_ids(enc["input_ids"])]

    def hazard(self, text: str) -> Span | None:
        """The earliest of the trailing runs of `hazard_tokens` to `n - 1` tokens that starts a
        private n-gram (see the class docstring)."""
        if not self._prefix_sets or not text:
            return None
        # Enough characters for n - 1 tokens and one more, whose start may be cut mid-word.
        tail_start = max(0, len(text) - 24 * self.n)
        enc = self.tokenizer(clean_text(text[tail_start:]), add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        if tail_start:
            ids, offsets = ids[1:], offsets[1:]
        for j in sorted(self._prefix_sets, reverse=True):
            if j > len(ids):
                continue
            if _contains(self._prefix_sets[j], _window_hashes(ids[-j:], j)).any():
                start = tail_start + offsets[-j][0]
                # An opening of nothing but names of code and the words between them ("the
                # `packed_ref_store` is") is the codebase's vocabulary: it goes up; a copy that
                # turns to the user's words is held from there.
                if self.min_words and names_code_only(text[start:]):
                    continue
                return Span(start, len(text), PRIVATE_NGRAM)
        return None


class RewrittenVerbatimDetector(Detector):
    """A passage of the history copied in another case or spacing: ALL CAPITALS, or two spaces
    between words, tokenizes to other IDs, so `VerbatimNgramDetector` does not see it. This one
    matches the same runs on lower-cased text with white space collapsed, on both sides, and maps
    its spans back to the text as written."""

    def __init__(self, inner: VerbatimNgramDetector) -> None:
        self.inner = inner

    @classmethod
    def from_texts(
        cls, history: Iterable[str], tokenizer: Tokenizer, *, n: int = 8, public_texts: Iterable[str] = ()
    ) -> RewrittenVerbatimDetector:
        normal = [_normalized(t)[0] for t in history]
        public = [_normalized(t)[0] for t in public_texts]
        return cls(VerbatimNgramDetector.from_texts(normal, tokenizer, n=n, public_texts=public))

    def for_prompt(self, prompt: str) -> RewrittenVerbatimDetector:
        return RewrittenVerbatimDetector(self.inner.for_prompt(_normalized(prompt)[0]))

    def __len__(self) -> int:
        return len(self.inner)

    def hazard(self, text: str) -> Span | None:
        normal, where = _normalized(text)
        h = self.inner.hazard(normal) if normal else None
        return None if h is None else Span(where[h.start] if h.start < len(where) else len(text), len(text), h.kind)

    def find(self, text: str) -> list[Span]:
        normal, where = _normalized(text)
        if not normal:
            return []
        spans = [Span(where[s.start], where[s.end - 1] + 1, PRIVATE_NGRAM) for s in self.inner.find(normal)]
        # Lower case hides a camelCase name ("refIterator" reads "refiterator", a word): the run is
        # judged again as written, with the token count of its normalized form.
        return [
            s
            for s in spans
            if self.inner.is_passage_text(
                text[s.start : s.end],
                len(self.inner.tokenizer.encode(_normalized(text[s.start : s.end])[0], add_special_tokens=False)),
            )
        ]


_SPACE_RUN = re.compile(r"\s+")


def _normalized(text: str) -> tuple[str, list[int]]:
    """`text` lower-cased with each run of white space one space, and the index in `text` of each
    character of the result."""
    out: list[str] = []
    where: list[int] = []
    last = 0
    for m in _SPACE_RUN.finditer(text):
        for i in range(last, m.start()):
            low = text[i].lower()
            out.append(low)
            where.extend([i] * len(low))
        out.append(" ")
        where.append(m.start())
        last = m.end()
    for i in range(last, len(text)):
        low = text[i].lower()
        out.append(low)
        where.extend([i] * len(low))
    return "".join(out), where


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


# Names of code: what a codebase calls its things, the same for every contributor to it, so a
# draft that repeats them says nothing about the user (docs/privacy.md, "A user's technical
# vocabulary"). A piece of text between spaces is one when it is a snake_case or _private name,
# a lower-case-initial camelCase name, a call ("f()", "strlen(prefix)"), a scoped name
# ("a::b", "a->b"), or one word in backticks; quotes, brackets and trailing punctuation around it
# are allowed. A dotted name alone ("jane.doe", "example.com") is not one: those are an address's
# parts as often. PascalCase alone ("McDonald", "MacKenzie") is not one: names of people have it.
_CODE_PIECE = re.compile(
    r"(?P<open>[\"'(\[{<*`]*)(?P<name>[A-Za-z_$][\w$]*(?:(?:::|->|\.)[A-Za-z_$][\w$]*)*)"
    r"(?P<call>\([^()\s]*\))?(?P<close>[\"')\]}>.,;:!?*`]*)",
    re.ASCII,
)
_CAMEL = re.compile(r"[a-z][a-z0-9]*[A-Z]", re.ASCII)
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")


@functools.lru_cache(maxsize=1)
def function_words() -> frozenset[str]:
    """English function words (`privacy/data/function_words.txt`): a run of them with names of code
    ("between X and Y is") holds no words of the user's."""
    text = resources.files("specsteer.privacy").joinpath("data/function_words.txt").read_text(encoding="utf-8")
    return frozenset(w for line in text.splitlines() if not line.startswith("#") for w in line.split())


def is_code_name(piece: str) -> bool:
    """Whether a piece of text between spaces is a name of code (see `_CODE_PIECE`)."""
    m = _CODE_PIECE.fullmatch(piece)
    if m is None:
        return False
    name = m["name"]
    return bool(
        (m["open"].endswith("`") and m["close"].startswith("`"))
        or m["call"]
        or ("_" in name and re.search(r"[A-Za-z]", name))
        or "::" in name
        or "->" in name
        or _CAMEL.match(name)
    )


def without_code_names(text: str) -> str:
    """`text` without its names of code (`is_code_name`), its other pieces joined by one space."""
    return " ".join(p for p in text.split() if not is_code_name(p))


def prose_words(text: str) -> int:
    """`run_words` of `text` without its names of code; where it names code, without its function
    words too (`function_words`): "between `a_b` and `c_d` is" relates the codebase's names, and
    holds none of the user's words. Prose that names no code counts as `run_words` counts it."""
    pieces = text.split()
    rest = [p for p in pieces if not is_code_name(p)]
    if len(rest) < len(pieces):
        rest = [p for p in rest if _bare(p) not in function_words()]
    return run_words(" ".join(rest))


def names_code_only(text: str) -> bool:
    """Whether `text` holds nothing but names of code, and (with one at least) function words and
    punctuation: an opening that goes up whatever follows it (`VerbatimNgramDetector.hazard`)."""
    pieces = text.split()
    rest = [p for p in pieces if not is_code_name(p)]
    if len(rest) < len(pieces):
        rest = [p for p in rest if _bare(p) not in function_words()]
    return not any(_LETTER_OR_DIGIT.search(p) for p in rest)


def _bare(piece: str) -> str:
    return piece.strip("\"'`([{<*)]}>.,;:!?").lower()


def _contains(sorted_set: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Membership of each query in a sorted unique array (binary search; np.isin re-sorts the set)."""
    if not sorted_set.size or not queries.size:
        return np.zeros(queries.size, dtype=bool)
    idx = np.minimum(np.searchsorted(sorted_set, queries), sorted_set.size - 1)
    return sorted_set[idx] == queries


def _encode_all(tokenizer: Tokenizer, texts: Iterable[str]) -> list[list[int]]:
    # A lone surrogate (JSON lets one through) would make the tokenizer raise: replaced first.
    batch = [clean_text(t) for t in texts if t]
    if not batch:
        return [[]]
    return list(tokenizer(batch, add_special_tokens=False)["input_ids"])
