"""A growing token sequence on some backend's KV cache, with rollback: the bookkeeping every backend shares.

Tokens are pushed lazily and fed in one forward pass when a distribution is needed, so a verify
block of K drafts costs one pass, and rolling back to an accepted prefix costs nothing when that
prefix's distribution is known.

This module imports neither torch nor transformers: the device's drafters (onnxruntime-genai,
llama.cpp) keep their rows as numpy arrays, and a device process that drafts on them never loads
torch (about 190 MB of resident memory). The torch rows of the Hugging Face models, on the CPU or
a GPU, are `core.kv.TensorSequence`'s, which overrides the few array operations below.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = ["CachedSequence", "log_softmax_np"]

Row = TypeVar("Row")
"""One fp32 log-distribution over the vocabulary: a numpy array here, a torch tensor in `core.kv`."""


def log_softmax_np(logits: Any) -> NDArray[np.float32]:
    """fp32 log-softmax over the last axis."""
    x = np.asarray(logits, dtype=np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):  # a -inf logit stays -inf
        return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32, copy=False)


class CachedSequence(ABC, Generic[Row]):
    """A growing token sequence on some backend's KV cache, with rollback. `ids` is the sequence;
    the cache covers `ids[:cached]`; `_rows[n]` is the fp32 log-distribution of the token after the
    first n ids, kept for the positions a rollback may return to (from the last truncation point
    on). A backend may return logits for only the last few tokens of a forward; a rollback to a
    position without a row re-feeds its last token.

    Rows are numpy arrays unless a subclass says otherwise (`_log_softmax`, `_vector`)."""

    def __init__(self, prefix_ids: Sequence[int]) -> None:
        if not prefix_ids:
            raise ValueError("a token sequence needs at least one prefix token")
        self.ids: list[int] = list(prefix_ids)
        self._cached = 0
        self._rows: dict[int, Row] = {}
        # The shortest prefix whose row can be read: the prefix given here, later the last
        # truncation point (rollbacks never go behind it). A prompt's prefill needs its last row only.
        self._floor = len(self.ids)
        self.forward_passes = 0
        # Each `_sync` forward's wall time, in order, once a caller asks for them by setting a list
        # (the device reports its own cost); the verifier's many sequences keep none.
        self.forward_seconds: list[float] | None = None

    @abstractmethod
    def _forward(self, new: Sequence[int]) -> Any:
        """Feed `new` after the cached ids and extend the cache; logits of the last m >= 1 of them,
        [m, vocab]. Rows past the last `rows_wanted()` are dropped unread, so a backend that can
        skip them (a model's `logits_to_keep`) should."""

    @abstractmethod
    def _crop(self, keep: int) -> None:
        """Cut the cache to the first `keep` ids (or rebuild it from nothing) and set `_cached`."""

    @abstractmethod
    def _tail_logits(self, tails: Sequence[Sequence[int]]) -> list[Any]:
        """For each tail, the logits [len(tail), vocab] of feeding it after all of `ids`, leaving
        the cache as it was."""

    def _log_softmax(self, logits: Any) -> Any:
        """fp32 log-probabilities of a forward's logits [m, vocab]; indexing the result gives the rows."""
        return log_softmax_np(logits)

    def _vector(self, values: list[Any], like: Row) -> Row:
        """One row-typed vector of the scalars `values` (each read out of a row like `like`)."""
        return np.array(values, dtype=np.float32)  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def cached(self) -> int:
        return self._cached

    def rows_wanted(self) -> int:
        """How many trailing rows a forward of the pending ids (`ids[cached:]`) must return: rows
        before the readable floor are never read. A prompt's prefill thus asks for its last row
        only; the distributions after every earlier prompt token (a prompt's length times the
        vocabulary, 400 MB in fp32 for 657 tokens of a 152k vocabulary) are never computed."""
        pending = len(self.ids) - self._cached
        return max(1, min(pending, len(self.ids) - self._floor + 1))

    def push(self, tokens: Sequence[int]) -> None:
        """Append tokens; they are fed on the next `next_logprobs`/`rows`."""
        self.ids.extend(int(t) for t in tokens)

    def _sync(self) -> None:
        if self._cached >= len(self.ids):
            return
        start = time.perf_counter()
        wanted = self.rows_wanted()
        rows = self._log_softmax(self._forward(self.ids[self._cached :])[-wanted:])
        if self.forward_seconds is not None:
            self.forward_seconds.append(time.perf_counter() - start)
        self.forward_passes += 1
        first = len(self.ids) - rows.shape[0] + 1
        for i in range(rows.shape[0]):
            self._rows[first + i] = rows[i]
        self._cached = len(self.ids)

    def next_logprobs(self) -> Row:
        """log P(next token | all ids), shape [vocab]."""
        return self.logprobs_at(len(self.ids))

    def logprobs_at(self, n: int) -> Row:
        """log P(token n+1 | ids[:n]) for a prefix length n at or after the last truncation."""
        self._sync()
        if n not in self._rows:
            raise IndexError(f"no distribution kept for prefix length {n}")
        return self._rows[n]

    def truncate(self, n: int) -> None:
        """Roll back to the first n ids. Distributions before n are dropped: the protocol only
        ever truncates to a committed point, and later rollbacks never go behind it."""
        if not 1 <= n <= len(self.ids):
            raise IndexError(f"cannot truncate a sequence of {len(self.ids)} tokens to {n}")
        del self.ids[n:]
        keep = n if n in self._rows else n - 1  # without row n, re-feed the last token
        if keep <= self._cached:
            self._crop(keep)  # also when nothing is removed: sliding-window layers trim here
        self._rows = {m: row for m, row in self._rows.items() if n <= m <= self._cached}
        self._floor = n

    def score_continuations(self, continuations: Sequence[Sequence[int]]) -> Row:
        """Sum of log P over each continuation's tokens after the current ids, shape [len].

        Single-token continuations read the current distribution; longer ones (cross-vocabulary
        candidates) need the backend to feed their tails (`_tail_logits`). Sums are in fp32, in
        token order, whichever array type the rows are.
        """
        base: Any = self.next_logprobs()
        scores = [base[c[0]] for c in continuations]
        longer = [i for i, c in enumerate(continuations) if len(c) > 1]
        if longer:
            tails = self._tail_logits([list(continuations[i][:-1]) for i in longer])
            self.forward_passes += 1
            for logits, i in zip(tails, longer, strict=True):
                c, rows = continuations[i], self._log_softmax(logits)
                scores[i] = scores[i] + sum(rows[j, c[j + 1]] for j in range(len(c) - 1))
        return self._vector(scores, base)
