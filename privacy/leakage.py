"""Leakage metrics over what the cloud received: pure functions, numpy only, no I/O.

* Canary exposure (Carlini et al., "The Secret Sharer", 2019): canaries drawn uniformly from a
  known space R are planted in private histories; an attacker scores every candidate of R by how
  well the uplink stream supports it, and exposure = log2|R| - log2(rank of the true canary).
  Exposure near log2|R| means the uplink singles the canary out; near 1 (ties everywhere) means
  the uplink says nothing about it.
* Counterfactual n-gram leakage: the same prompts run with the real profile and with a swapped
  profile; profile-specific n-grams that reach the real run's uplink, and not the swapped run's.
* Membership of one history document: an attacker's scores on runs with and without the document;
  AUROC and TPR at a fixed (1 %) false-positive rate.
* The size channel: per-round uplink sizes against a secret label (mutual information and the best
  size-based guess). The constant-size frame that closes it is the wire's own `PaddedRound`
  (`core.wire.encode_round(..., pad_to=K)`), which a session declares with `padded_frames`.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MAX_RANKED_SPACE",
    "CanarySpace",
    "NgramLeakage",
    "SizeChannel",
    "auroc",
    "canary_exposure",
    "canary_rank",
    "canary_readings",
    "canary_scores",
    "counterfactual_ngram_leakage",
    "exposure",
    "exposure_from_rank",
    "membership_score",
    "ngrams",
    "plant_canary",
    "roc_curve",
    "size_channel",
    "support_score",
    "tpr_at_fpr",
]


# ----------------------------------------------------------------------------------------------
# Canary exposure
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CanarySpace:
    """R = every `template` with `{secret}` replaced by `length` symbols from `alphabet`.

    The default, "my PIN is {6 digits}", has |R| = 10^6 (log2|R| ~ 19.9 bits).
    """

    template: str = "my PIN is {secret}"
    alphabet: str = string.digits
    length: int = 6

    def __post_init__(self) -> None:
        if self.template.count("{secret}") != 1:
            raise ValueError("a canary template holds {secret} exactly once")
        if self.length < 1 or len(set(self.alphabet)) != len(self.alphabet) or len(self.alphabet) < 2:
            raise ValueError("a canary space needs length >= 1 and an alphabet of 2+ distinct symbols")

    @property
    def size(self) -> int:
        return len(self.alphabet) ** self.length

    @property
    def bits(self) -> float:
        return self.length * math.log2(len(self.alphabet))

    def render(self, secret: str) -> str:
        if len(secret) != self.length or any(c not in self.alphabet for c in secret):
            raise ValueError(f"{secret!r} is not in this canary space")
        return self.template.replace("{secret}", secret)

    def sample(self, rng: np.random.Generator, count: int = 1, *, exclude: Iterable[str] = ()) -> list[str]:
        """`count` distinct secrets drawn uniformly from R, none of them in `exclude`."""
        banned = set(exclude)
        if count > self.size - len(banned):
            raise ValueError(f"cannot draw {count} distinct secrets from a space of {self.size}")
        out: list[str] = []
        seen = set(banned)
        while len(out) < count:
            secret = "".join(self.alphabet[i] for i in rng.integers(0, len(self.alphabet), self.length))
            if secret not in seen:
                seen.add(secret)
                out.append(secret)
        return out

    def all_secrets(self) -> list[str]:
        """Every secret of R (only for small spaces: exact ranks in tests)."""
        if self.size > 1_000_000:
            raise ValueError(f"refusing to enumerate {self.size} secrets; sample instead")
        out = [""]
        for _ in range(self.length):
            out = [p + c for p in out for c in self.alphabet]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"template": self.template, "alphabet": self.alphabet, "length": self.length}


def plant_canary(bodies: Sequence[str], canary: str, rng: np.random.Generator) -> tuple[list[str], int]:
    """`bodies` with `canary` appended as its own line to one entry chosen at random; (bodies, index)."""
    if not bodies:
        raise ValueError("cannot plant a canary in an empty history")
    i = int(rng.integers(0, len(bodies)))
    out = list(bodies)
    out[i] = f"{out[i].rstrip()}\n\n{canary}" if out[i].strip() else canary
    return out, i


def _longest_common_substring(a: str, b: str) -> int:
    """Length of the longest substring of `a` that occurs in `b` (|a| is a short secret)."""
    best = 0
    for i in range(len(a)):
        # Only lengths that beat the best so far are worth testing; each is a substring search.
        j = i + best + 1
        while j <= len(a) and a[i:j] in b:
            best = j - i
            j += 1
    return best


def support_score(candidate_text: str, secret: str, stream: str) -> float:
    """How well `stream` (the decoded uplink) supports one rendered candidate.

    Primary: the longest prefix of the rendered candidate that occurs in the stream (the template
    anchors it, so "my PIN is 12" supports every candidate starting with 12). Tie-break: the
    longest run of the secret itself found anywhere, scaled below one prefix character.
    """
    prefix = 0
    lo, hi = 0, len(candidate_text)
    while lo < hi:  # occurrence of prefixes is monotone: binary search the longest
        mid = (lo + hi + 1) // 2
        if candidate_text[:mid] in stream:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    return prefix + _longest_common_substring(secret, stream) / (len(secret) + 1)


def canary_scores(space: CanarySpace, secrets_: Sequence[str], stream: str) -> np.ndarray:
    """`support_score` of each secret's rendering against `stream`."""
    return np.array([support_score(space.render(s), s, stream) for s in secrets_], dtype=np.float64)


# The largest space `canary_rank` enumerates (about a second per million secrets on one core).
MAX_RANKED_SPACE = 10**8
_CHUNK = 1 << 20


def canary_rank(space: CanarySpace, secret: str, stream: str) -> float:
    """The exact rank of `secret` among every secret of `space` by `support_score` against `stream`
    (1 = best supported; the others that tie with it count half, as in `exposure`).

    Every secret of R is scored, vectorized: a secret's score depends only on how many of its
    leading symbols follow the template's opening somewhere in the stream (and, for a secret that
    follows it in full, how much of the template's end comes next), and on the longest run of its
    symbols that occurs anywhere in the stream. Both are looked up among the stream's substrings
    for a whole chunk of secrets at once, so |R| = 10^6 takes about a second. The result equals
    scoring each of the |R| - 1 others with `canary_scores` and passing them to `exposure` (the
    tests check it on small spaces); spaces above `MAX_RANKED_SPACE` are refused, not estimated.
    """
    space.render(secret)  # raises for a secret outside the space
    if space.size > MAX_RANKED_SPACE:
        raise ValueError(f"a canary space of {space.size} secrets is too large to rank exactly")
    true = support_score(space.render(secret), secret, stream)
    found = _StreamRuns(space, stream)
    above = ties = 0
    for start in range(0, space.size, _CHUNK):
        scores = found.scores(np.arange(start, min(start + _CHUNK, space.size), dtype=np.int64))
        above += int(np.count_nonzero(scores > true))
        ties += int(np.count_nonzero(scores == true))
    return 1.0 + above + 0.5 * (ties - 1)  # the secret ties with itself once


def canary_exposure(space: CanarySpace, secret: str, stream: str) -> float:
    """Exposure of `secret` in `stream` with its exact rank among all of R (`canary_rank`), the
    most of the stream's readings (`canary_readings`): a canary that went up spaced out, with
    separators, in number words or reversed is as exposed as one that went up verbatim."""
    space.render(secret)  # raises for a secret outside the space
    return max(
        exposure_from_rank(canary_rank(sp, sec, text), space.size)
        for sp, sec, text in canary_readings(space, secret, stream)
    )


# Separators a secret's symbols may be written apart with ("4 0 2 9 1 3", "402-913", "40.29.13").
_SEPARATORS = " \t\n-._/,:"


def canary_readings(space: CanarySpace, secret: str, stream: str) -> list[tuple[CanarySpace, str, str]]:
    """The ways an attacker reads `stream` for a canary of `space`, as (space, secret, stream):
    as written; folded (`privacy.normalize.fold`: case, lookalikes, number words) with the
    separators between two symbols of the alphabet dropped, the template folded alike; and each
    of these reversed (a secret written backwards after the template reads forwards before the
    reversed template: the same space, so ranks stay comparable). The folded readings are skipped
    for an alphabet folding changes."""
    from specsteer.privacy.normalize import fold_string  # a text module the numeric ones do not need

    head, tail = space.template.split("{secret}")

    def reverse(sp: CanarySpace, sec: str, text: str) -> tuple[CanarySpace, str, str]:
        h, t = sp.template.split("{secret}")
        # "my PIN is 319204" read backwards is "402913 si NIP ym": the secret itself, the template reversed.
        return CanarySpace(t[::-1] + "{secret}" + h[::-1], sp.alphabet, sp.length), sec, text[::-1]

    out = [(space, secret, stream)]
    if fold_string(space.alphabet) == space.alphabet and not set(_SEPARATORS) & set(space.alphabet):
        symbols = "".join(re.escape(c) for c in space.alphabet)
        joined = re.compile(f"(?<=[{symbols}])[{re.escape(_SEPARATORS)}]{{1,3}}(?=[{symbols}])")

        def collapse(text: str) -> str:
            return joined.sub("", fold_string(text))

        folded = collapse(stream)
        template = collapse(head) + "{secret}" + collapse(tail)
        if folded != stream or template != space.template:
            out.append((CanarySpace(template, space.alphabet, space.length), secret, folded))
    return out + [reverse(*r) for r in out]


class _StreamRuns:
    """What of a canary space the stream spells: its runs of alphabet symbols, as numbers."""

    def __init__(self, space: CanarySpace, stream: str) -> None:
        self.space = space
        self.stream = stream
        self.base, self.length = len(space.alphabet), space.length
        index = {c: i for i, c in enumerate(space.alphabet)}
        symbols = np.array([index.get(c, -1) for c in stream], dtype=np.int64)
        self.head, self.tail = space.template.split("{secret}")
        self.head_found = self.head in stream
        starts = np.array(
            [p + len(self.head) for p in _occurrences(stream, self.head)] if self.head_found else [], dtype=np.int64
        )
        # runs[k]: every run of k symbols anywhere in the stream; following[k]: the runs of k
        # symbols right after an occurrence of the template's opening. Both as sorted numbers.
        self.runs: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        self.following: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        for k in range(1, self.length + 1):
            codes, valid = self._codes(symbols, k)
            self.runs.append(np.unique(codes[valid]))
            after = starts[starts <= symbols.size - k]
            self.following.append(np.unique(codes[after][valid[after]]))

    def _codes(self, symbols: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if symbols.size < k:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        windows = np.lib.stride_tricks.sliding_window_view(symbols, k)
        weights = self.base ** np.arange(k - 1, -1, -1, dtype=np.int64)
        return windows @ weights, np.asarray((windows >= 0).all(axis=1), dtype=bool)

    def scores(self, numbers: np.ndarray) -> np.ndarray:
        """`support_score` of the secrets numbered `numbers` (secret i spells i in base |alphabet|)."""
        base, length = self.base, self.length
        digits = np.empty((numbers.size, length), dtype=np.int64)
        rest = numbers.copy()
        for j in range(length - 1, -1, -1):
            digits[:, j] = rest % base
            rest //= base

        def window(i: int, k: int) -> np.ndarray:
            code = np.zeros(numbers.size, dtype=np.int64)
            for j in range(i, i + k):
                code = code * base + digits[:, j]
            return code

        # A secret with a window of k symbols in the stream has one of every shorter length: the
        # longest such run is the number of lengths k with a hit.
        longest = np.zeros(numbers.size, dtype=np.int64)
        for k in range(1, length + 1):
            if not self.runs[k].size:
                break
            longest += np.any([np.isin(window(i, k), self.runs[k]) for i in range(length - k + 1)], axis=0)

        head, stream = self.head, self.stream
        if not self.head_found:  # the rendering's longest prefix in the stream is a prefix of the opening
            prefix = np.full(numbers.size, next(k for k in range(len(head), -1, -1) if head[:k] in stream))
        else:
            prefix = np.full(numbers.size, len(head), dtype=np.int64)
            for j in range(1, length + 1):
                if not self.following[j].size:
                    break
                prefix += np.isin(window(0, j), self.following[j])
            # The few secrets that follow the opening in full: the template's end may follow them too.
            for i in np.flatnonzero(prefix == len(head) + length).tolist():
                rendered = head + "".join(self.space.alphabet[d] for d in digits[i]) + self.tail
                prefix[i] = next(k for k in range(len(rendered), -1, -1) if rendered[:k] in stream)
        return prefix + longest / (length + 1)


def _occurrences(stream: str, sub: str) -> list[int]:
    """Every start of `sub` in `stream`, overlapping ones included."""
    out, p = [], stream.find(sub)
    while p != -1:
        out.append(p)
        p = stream.find(sub, p + 1)
    return out


def exposure_from_rank(rank: float, space_size: int) -> float:
    """log2|R| - log2(rank); rank 1 is the most exposed."""
    if not 1 <= rank <= space_size:
        raise ValueError(f"a rank lies in [1, {space_size}]; got {rank}")
    return math.log2(space_size) - math.log2(rank)


def exposure(true_score: float, candidate_scores: Sequence[float] | np.ndarray, space_size: int) -> float:
    """Exposure of the true canary given the scores of other candidates from R (higher = better supported).

    With all |R| - 1 others scored, the rank is exact; with a uniform sample, the share of candidates
    that beat the canary estimates its rank among all of R. Ties count half, so a stream that says
    nothing (every score equal) gives rank ~|R|/2 and exposure ~1 bit, not a spurious maximum.
    """
    scores = np.asarray(candidate_scores, dtype=np.float64)
    if scores.size == 0:
        raise ValueError("exposure needs at least one other candidate's score")
    if scores.size > space_size - 1:
        raise ValueError(f"{scores.size} other candidates cannot come from a space of {space_size}")
    above = float(np.sum(scores > true_score)) + 0.5 * float(np.sum(scores == true_score))
    rank = 1.0 + above * (space_size - 1) / scores.size
    return exposure_from_rank(rank, space_size)


# ----------------------------------------------------------------------------------------------
# n-gram leakage and membership
# ----------------------------------------------------------------------------------------------


def ngrams(sequences: Iterable[Sequence[int]], n: int) -> set[tuple[int, ...]]:
    """Every n-gram of token IDs within each sequence (none across sequences)."""
    if n < 1:
        raise ValueError(f"n must be at least 1; got {n}")
    out: set[tuple[int, ...]] = set()
    for seq in sequences:
        s = tuple(seq)
        out.update(s[i : i + n] for i in range(len(s) - n + 1))
    return out


@dataclass(frozen=True)
class NgramLeakage:
    n: int
    profile_specific: int  # n-grams of the real profile absent from the swapped profile and the prompts
    uplink_ngrams: int  # distinct n-grams in the real run's uplink
    leaked: int  # profile-specific n-grams in the real uplink and not in the swapped run's uplink

    @property
    def share_of_profile(self) -> float:
        """Share of the profile-specific n-grams that reached the uplink."""
        return self.leaked / self.profile_specific if self.profile_specific else 0.0

    @property
    def share_of_uplink(self) -> float:
        """Share of the uplink's n-grams that are leaked profile-specific ones."""
        return self.leaked / self.uplink_ngrams if self.uplink_ngrams else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "profile_specific": self.profile_specific,
            "uplink_ngrams": self.uplink_ngrams,
            "leaked": self.leaked,
            "share_of_profile": self.share_of_profile,
            "share_of_uplink": self.share_of_uplink,
        }


def counterfactual_ngram_leakage(
    uplink_real: Iterable[Sequence[int]],
    uplink_swapped: Iterable[Sequence[int]],
    profile_real: Iterable[Sequence[int]],
    profile_swapped: Iterable[Sequence[int]],
    prompts: Iterable[Sequence[int]] = (),
    *,
    n: int = 4,
) -> NgramLeakage:
    """The counterfactual: what the real profile put on the wire that the swapped one did not."""
    specific = ngrams(profile_real, n) - ngrams(profile_swapped, n) - ngrams(prompts, n)
    real = ngrams(uplink_real, n)
    leaked = (real & specific) - ngrams(uplink_swapped, n)
    return NgramLeakage(n=n, profile_specific=len(specific), uplink_ngrams=len(real), leaked=len(leaked))


def membership_score(
    uplink: Iterable[Sequence[int]], document: Sequence[int], *, n: int = 4, exclude: Iterable[Sequence[int]] = ()
) -> float:
    """The attacker's score: the share of the document's n-grams (minus `exclude`, e.g. the prompts) in the uplink."""
    doc = ngrams([document], n) - ngrams(exclude, n)
    if not doc:
        return 0.0
    return len(doc & ngrams(uplink, n)) / len(doc)


def _midranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    sorted_vals = values[order]
    i = 0
    while i < values.size:
        j = i
        while j + 1 < values.size and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def auroc(positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray) -> float:
    """Area under the ROC curve = P(score of a member > score of a non-member), ties counting half."""
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        raise ValueError("AUROC needs at least one positive and one negative score")
    ranks = _midranks(np.concatenate([pos, neg]))
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


def roc_curve(
    positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds): predicting "member" when score >= threshold, from +inf down."""
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        raise ValueError("a ROC curve needs at least one positive and one negative score")
    thresholds = np.concatenate([[np.inf], np.unique(np.concatenate([pos, neg]))[::-1]])
    tpr = np.array([np.mean(pos >= t) for t in thresholds])
    fpr = np.array([np.mean(neg >= t) for t in thresholds])
    return fpr, tpr, thresholds


def tpr_at_fpr(
    positive: Sequence[float] | np.ndarray, negative: Sequence[float] | np.ndarray, fpr: float = 0.01
) -> float:
    """The best true-positive rate at a false-positive rate of at most `fpr` (no interpolation).

    With fewer than 1/fpr negatives this means no false positive at all, which is the honest reading.
    """
    f, t, _ = roc_curve(positive, negative)
    return float(t[f <= fpr + 1e-12].max())


# ----------------------------------------------------------------------------------------------
# The size channel and constant-size frames
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeChannel:
    mutual_information_bits: float  # plug-in I(size; secret) over the observed rounds
    accuracy: float  # guessing the secret from the size with the best rule on these rounds
    baseline: float  # guessing the most frequent secret, ignoring the size
    distinct_sizes: int

    def as_dict(self) -> dict[str, float | int]:
        return dict(self.__dict__)


def size_channel(sizes: Sequence[int], secrets_: Sequence[object]) -> SizeChannel:
    """How much the per-round uplink size says about a secret label (e.g. a profile bit).

    Both numbers are in-sample (the plug-in MI is biased upward on few rounds), which errs toward
    reporting a channel; a constant size gives exactly 0 bits and the baseline accuracy.
    """
    if len(sizes) != len(secrets_) or not sizes:
        raise ValueError("size_channel needs one secret label per observed size, and at least one")
    total = len(sizes)
    joint = Counter(zip(sizes, secrets_, strict=True))
    by_size = Counter(sizes)
    by_secret = Counter(secrets_)
    mi = 0.0
    for (s, y), c in joint.items():
        mi += c / total * math.log2(c * total / (by_size[s] * by_secret[y]))
    best = sum(max(c for (s2, _), c in joint.items() if s2 == s) for s in by_size)
    return SizeChannel(
        mutual_information_bits=max(mi, 0.0),
        accuracy=best / total,
        baseline=max(by_secret.values()) / total,
        distinct_sizes=len(by_size),
    )
