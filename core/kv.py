"""A causal LM's KV cache over a growing token sequence, with rollback.

Device and cloud both keep one per model per session. Tokens are pushed lazily and fed in one
forward pass when a distribution is needed, so a verify block of K drafts costs one pass, and
rolling back to an accepted prefix costs nothing when that prefix's distribution is known.

Who runs a forward is injectable: by default `single_forward` (one sequence on its own cache);
the verifier injects a runner that merges the pending forwards of concurrent sessions of one
model into one padded forward (`server/kv_batch.py`, scheduled by `server/batching.py`), which
leaves each sequence's cache and rows as its own forward would, up to float rounding.

The bookkeeping (rows kept, rollback, continuation scoring) is `CachedSequence`; `TokenSequence`
runs it on a Hugging Face model, and the device's llama.cpp drafter (`sdk/llamacpp.py`) on a
llama.cpp context.

The model may sit on a GPU in any dtype: its inputs are built on its device, its rows stay there
as fp32 log-probabilities, and a caller reads a block's few values back at once (`block_logprobs`)
rather than one synchronising scalar a token.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from core.steering import log_softmax

__all__ = ["CachedSequence", "ForwardRunner", "TokenSequence", "model_device", "recording_cache", "single_forward"]

ForwardRunner = Callable[["TokenSequence", Sequence[int]], torch.Tensor]
"""Feeds `new` ids to `seq.model` after `seq.cache` (which covers `seq.ids[:seq.cached]`), appends
their KV entries to that cache, and returns their logits, shape [len(new), vocab]."""


class CachedSequence(ABC):
    """A growing token sequence on some backend's KV cache, with rollback: the bookkeeping every
    backend shares. `ids` is the sequence; the cache covers `ids[:cached]`; `_rows[n]` is the fp32
    log-distribution of the token after the first n ids, kept for the positions a rollback may
    return to (from the last truncation point on). A backend may return logits for only the last
    few tokens of a forward; a rollback to a position without a row re-feeds its last token."""

    def __init__(self, prefix_ids: Sequence[int]) -> None:
        if not prefix_ids:
            raise ValueError("a token sequence needs at least one prefix token")
        self.ids: list[int] = list(prefix_ids)
        self._cached = 0
        self._rows: dict[int, torch.Tensor] = {}
        self.forward_passes = 0

    @abstractmethod
    def _forward(self, new: Sequence[int]) -> torch.Tensor:
        """Feed `new` after the cached ids and extend the cache; logits of the last m >= 1 of them, [m, vocab]."""

    @abstractmethod
    def _crop(self, keep: int) -> None:
        """Cut the cache to the first `keep` ids (or rebuild it from nothing) and set `_cached`."""

    @abstractmethod
    def _tail_logits(self, tails: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """For each tail, the logits [len(tail), vocab] of feeding it after all of `ids`, leaving
        the cache as it was."""

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def cached(self) -> int:
        return self._cached

    def push(self, tokens: Sequence[int]) -> None:
        """Append tokens; they are fed on the next `next_logprobs`/`rows`."""
        self.ids.extend(int(t) for t in tokens)

    def _sync(self) -> None:
        if self._cached >= len(self.ids):
            return
        rows = log_softmax(self._forward(self.ids[self._cached :]))
        self.forward_passes += 1
        first = len(self.ids) - rows.shape[0] + 1
        for i in range(rows.shape[0]):
            self._rows[first + i] = rows[i]
        self._cached = len(self.ids)

    def next_logprobs(self) -> torch.Tensor:
        """log P(next token | all ids), shape [vocab]."""
        return self.logprobs_at(len(self.ids))

    def logprobs_at(self, n: int) -> torch.Tensor:
        """log P(token n+1 | ids[:n]) for a prefix length n at or after the last truncation."""
        self._sync()
        if n not in self._rows:
            raise IndexError(f"no distribution kept for prefix length {n}")
        return self._rows[n]

    def block_logprobs(self, start: int, tokens: Sequence[int]) -> tuple[list[float], list[int]]:
        """For each j: log P(tokens[j] | ids[:start + j]) and the most likely token there (the
        first on ties), read back from the rows' device in one copy."""
        if not tokens:
            return [], []
        rows = torch.stack([self.logprobs_at(start + j) for j in range(len(tokens))])
        picked = torch.tensor(list(tokens), dtype=torch.long, device=rows.device).unsqueeze(1)
        logps = rows.gather(1, picked).squeeze(1)
        return logps.tolist(), rows.argmax(dim=-1).tolist()

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

    def score_continuations(self, continuations: Sequence[Sequence[int]]) -> torch.Tensor:
        """Sum of log P over each continuation's tokens after the current ids, shape [len].

        Single-token continuations read the current distribution; longer ones (cross-vocabulary
        candidates) need the backend to feed their tails (`_tail_logits`).
        """
        base = self.next_logprobs()
        scores = torch.stack([base[c[0]] for c in continuations]) if continuations else base.new_zeros(0)
        longer = [i for i, c in enumerate(continuations) if len(c) > 1]
        if not longer:
            return scores
        tails = self._tail_logits([list(continuations[i][:-1]) for i in longer])
        self.forward_passes += 1
        scores = scores.clone()
        for logits, i in zip(tails, longer, strict=True):
            c, rows = continuations[i], log_softmax(logits)
            scores[i] = scores[i] + sum(rows[j, c[j + 1]] for j in range(len(c) - 1))
        return scores


class TokenSequence(CachedSequence):
    """A sequence on a Hugging Face model's `DynamicCache`; every forward keeps all its rows."""

    def __init__(self, model: PreTrainedModel, prefix_ids: Sequence[int], runner: ForwardRunner | None = None) -> None:
        super().__init__(prefix_ids)
        self.model = model
        self._cache = self._new_cache()
        self._runner: ForwardRunner = runner if runner is not None else single_forward

    @property
    def cache(self) -> DynamicCache:
        """The KV cache of `ids[:cached]` (a runner appends to it; nothing else should)."""
        return self._cache

    def _forward(self, new: Sequence[int]) -> torch.Tensor:
        return self._runner(self, new)

    def _new_cache(self) -> DynamicCache:
        return recording_cache(self.model)

    def _crop(self, keep: int) -> None:
        try:
            self._cache.crop(keep - self._cached)  # a negative count: tokens to remove
            if self._cache.get_seq_length() != keep:
                raise ValueError("cache did not crop")
            self._cached = keep
        except (ValueError, RuntimeError):
            # A cache that cannot roll back that far is rebuilt from the start.
            self._cache = self._new_cache()
            self._cached = 0

    def _tail_logits(self, tails: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """One batched forward on a copy of the cache, right-padded so padding never affects the
        positions read."""
        width = max(len(t) for t in tails)
        batch = torch.zeros((len(tails), width), dtype=torch.long)
        for row, tail in enumerate(tails):
            batch[row, : len(tail)] = torch.tensor(list(tail))
        batch = batch.to(model_device(self.model))
        cache = copy.deepcopy(self._cache)
        cache.batch_repeat_interleave(len(tails))
        with torch.inference_mode():
            out = self.model(input_ids=batch, past_key_values=cache, use_cache=True)
        return [out.logits[row, : len(tail)] for row, tail in enumerate(tails)]


def model_device(model: PreTrainedModel) -> torch.device:
    """Where `model`'s inputs must be: the device of its first parameter (the CPU if it has none)."""
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def recording_cache(model: PreTrainedModel) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    for layer in cache.layers:
        # Sliding-window layers otherwise drop states past the window at once, and then
        # cannot roll back; recording keeps them until the next crop.
        if hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()
    return cache


def single_forward(seq: TokenSequence, new: Sequence[int]) -> torch.Tensor:
    """The default runner: one forward of `seq`'s model over `new`, on `seq`'s own cache."""
    with torch.inference_mode():
        out = seq.model(
            input_ids=torch.tensor([new], dtype=torch.long, device=model_device(seq.model)),
            past_key_values=seq.cache,
            use_cache=True,
        )
    return out.logits[0]
