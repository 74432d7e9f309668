"""A causal LM's KV cache over a growing token sequence, with rollback.

Device and cloud both keep one per model per session. Tokens are pushed lazily and fed in one
forward pass when a distribution is needed, so a verify block of K drafts costs one pass, and
rolling back to an accepted prefix costs nothing when that prefix's distribution is known.

Who runs a forward is injectable: by default `single_forward` (one sequence on its own cache);
the verifier injects a runner that merges the pending forwards of concurrent sessions of one
model into one padded forward (`server/kv_batch.py`, scheduled by `server/batching.py`), which
leaves each sequence's cache and rows as its own forward would, up to float rounding.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from core.steering import log_softmax

__all__ = ["ForwardRunner", "TokenSequence", "recording_cache", "single_forward"]

ForwardRunner = Callable[["TokenSequence", Sequence[int]], torch.Tensor]
"""Feeds `new` ids to `seq.model` after `seq.cache` (which covers `seq.ids[:seq.cached]`), appends
their KV entries to that cache, and returns their logits, shape [len(new), vocab]."""


class TokenSequence:
    """`ids` is the sequence; the cache covers `ids[:cached]`; `_rows[n]` is the fp32
    log-distribution of the token after the first n ids, kept for the positions a rollback may
    return to (from the last truncation point on)."""

    def __init__(self, model: PreTrainedModel, prefix_ids: Sequence[int], runner: ForwardRunner | None = None) -> None:
        if not prefix_ids:
            raise ValueError("a token sequence needs at least one prefix token")
        self.model = model
        self.ids: list[int] = list(prefix_ids)
        self._cache = self._new_cache()
        self._cached = 0
        self._rows: dict[int, torch.Tensor] = {}
        self._runner: ForwardRunner = runner if runner is not None else single_forward
        self.forward_passes = 0

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def cache(self) -> DynamicCache:
        """The KV cache of `ids[:cached]` (a runner appends to it; nothing else should)."""
        return self._cache

    @property
    def cached(self) -> int:
        return self._cached

    def push(self, tokens: Sequence[int]) -> None:
        """Append tokens; they are fed on the next `next_logprobs`/`rows`."""
        self.ids.extend(int(t) for t in tokens)

    def _sync(self) -> None:
        if self._cached >= len(self.ids):
            return
        new = self.ids[self._cached :]
        logits = self._runner(self, new)
        self.forward_passes += 1
        rows = log_softmax(logits)
        for i in range(len(new)):
            self._rows[self._cached + i + 1] = rows[i]
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

    def score_continuations(self, continuations: Sequence[Sequence[int]]) -> torch.Tensor:
        """Sum of log P over each continuation's tokens after the current ids, shape [len].

        Single-token continuations read the current distribution; longer ones (cross-vocabulary
        candidates) run one batched forward on a copy of the cache, right-padded so padding never
        affects the positions read.
        """
        base = self.next_logprobs()
        scores = torch.stack([base[c[0]] for c in continuations]) if continuations else torch.zeros(0)
        longer = [i for i, c in enumerate(continuations) if len(c) > 1]
        if not longer:
            return scores
        width = max(len(continuations[i]) for i in longer) - 1
        batch = torch.zeros((len(longer), width), dtype=torch.long)
        for row, i in enumerate(longer):
            tail = list(continuations[i][:-1])
            batch[row, : len(tail)] = torch.tensor(tail)
        cache = copy.deepcopy(self._cache)
        cache.batch_repeat_interleave(len(longer))
        with torch.inference_mode():
            out = self.model(input_ids=batch, past_key_values=cache, use_cache=True)
        self.forward_passes += 1
        rows = log_softmax(out.logits)
        scores = scores.clone()
        for row, i in enumerate(longer):
            c = continuations[i]
            scores[i] = scores[i] + sum(rows[row, j, c[j + 1]] for j in range(len(c) - 1))
        return scores


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
            input_ids=torch.tensor([new], dtype=torch.long),
            past_key_values=seq.cache,
            use_cache=True,
        )
    return out.logits[0]
