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
from transformers.cache_utils import DynamicLayer

from core.steering import log_softmax

__all__ = ["ForwardRunner", "TokenSequence", "recording_cache", "single_forward"]

ForwardRunner = Callable[["TokenSequence", Sequence[int]], torch.Tensor]
"""Feeds `new` ids to `seq.model` after `seq.cache` (which covers `seq.ids[:seq.cached]`), appends
their KV entries to that cache, and returns their logits, shape [len(new), vocab]."""


class TokenSequence:
    """`ids` is the sequence; the cache covers `_cache_ids` (`_cached` tokens); `_rows[n]` is the
    fp32 log-distribution of the token after the first n of `_cache_ids`, kept for the positions a
    rollback may return to (from the last truncation point on).

    A rollback is lazy: `truncate` only shortens `ids`, and the cache is cropped at the next read,
    to the longest prefix it shares with `ids` by then. So a rollback followed by pushing the same
    tokens again (a cross-vocabulary re-tokenization that comes out as before) re-feeds nothing.
    """

    def __init__(self, model: PreTrainedModel, prefix_ids: Sequence[int], runner: ForwardRunner | None = None) -> None:
        if not prefix_ids:
            raise ValueError("a token sequence needs at least one prefix token")
        self.model = model
        self.ids: list[int] = list(prefix_ids)
        self._cache = self._new_cache()
        self._cached = 0
        self._cache_ids: list[int] = []
        self._rows: dict[int, torch.Tensor] = {}
        self._runner: ForwardRunner = runner if runner is not None else single_forward
        self._floor: int | None = None  # the lowest truncation point since the last reconcile
        self.forward_passes = 0

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def cache(self) -> DynamicCache:
        """The KV cache of `ids[:cached]` (a runner appends to it; nothing else should)."""
        self._reconcile()
        return self._cache

    @property
    def cached(self) -> int:
        """How many leading `ids` the cache covers (pending rollbacks applied first)."""
        self._reconcile()
        return self._cached

    def push(self, tokens: Sequence[int]) -> None:
        """Append tokens; they are fed on the next `next_logprobs`/`rows`."""
        self.ids.extend(int(t) for t in tokens)

    def _sync(self) -> None:
        self._reconcile()
        if self._cached >= len(self.ids):
            return
        new = self.ids[self._cached :]
        logits = self._runner(self, new)
        self.forward_passes += 1
        rows = log_softmax(logits)
        for i in range(len(new)):
            self._rows[self._cached + i + 1] = rows[i]
        self._cached = len(self.ids)
        self._cache_ids = list(self.ids)

    def next_logprobs(self) -> torch.Tensor:
        """log P(next token | all ids), shape [vocab]."""
        return self.logprobs_at(len(self.ids))

    def logprobs_at(self, n: int) -> torch.Tensor:
        """log P(token n+1 | ids[:n]) for a prefix length n at or after the last truncation."""
        self._sync()
        if n not in self._rows or n > len(self.ids):
            raise IndexError(f"no distribution kept for prefix length {n}")
        return self._rows[n]

    def truncate(self, n: int) -> None:
        """Roll back to the first n ids. Distributions before n are dropped: the protocol only
        ever truncates to a committed point, and later rollbacks never go behind it. The cache
        itself is cropped lazily, on the next read (see the class docstring)."""
        if not 1 <= n <= len(self.ids):
            raise IndexError(f"cannot truncate a sequence of {len(self.ids)} tokens to {n}")
        del self.ids[n:]
        self._floor = n if self._floor is None else min(self._floor, n)

    def _reconcile(self) -> None:
        """Apply pending rollbacks: crop the cache to what it shares with `ids`, keeping the row
        for the end of `ids` (or re-feeding the last token when that row was dropped)."""
        if self._floor is None:
            return
        floor, self._floor = self._floor, None
        common = 0
        limit = min(len(self.ids), self._cached)
        while common < limit and self.ids[common] == self._cache_ids[common]:
            common += 1
        self._rows = {m: row for m, row in self._rows.items() if floor <= m <= common}
        keep = common if common < len(self.ids) or common in self._rows else common - 1
        self._crop(keep)  # also when nothing is removed: sliding-window layers trim here
        self._rows = {m: row for m, row in self._rows.items() if m <= self._cached}

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
        del self._cache_ids[self._cached :]

    def score_continuations(self, continuations: Sequence[Sequence[int]]) -> torch.Tensor:
        """Sum of log P over each continuation's tokens after the current ids, shape [len].

        Single-token continuations read the current distribution. Longer ones (cross-vocabulary
        candidates) run one extra forward: where the cache is plain full attention, all their
        tails go in one row after the shared cache, with a tree mask so each tail sees the past
        and its own earlier tokens only, and the cache is cropped back after (no copy of the
        cache, one small block); otherwise one batched forward on copies of the cache.
        """
        base = self.next_logprobs()
        scores = torch.stack([base[c[0]] for c in continuations]) if continuations else torch.zeros(0)
        longer = [i for i, c in enumerate(continuations) if len(c) > 1]
        if not longer:
            return scores
        tails = [list(continuations[i][:-1]) for i in longer]
        rows = self._tree_rows(tails) if _plain_cache(self._cache) else self._batched_rows(tails)
        self.forward_passes += 1
        scores = scores.clone()
        for tail_rows, i in zip(rows, longer, strict=True):
            c = continuations[i]
            scores[i] = scores[i] + tail_rows[torch.arange(len(c) - 1), torch.tensor(c[1:])].sum()
        return scores

    def _tree_rows(self, tails: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Log-distributions after each prefix of each tail, from one forward of all tails."""
        past = self._cached
        flat = [t for tail in tails for t in tail]
        width = len(flat)
        mask = torch.full((width, past + width), torch.finfo(torch.float32).min)
        mask[:, :past] = 0.0
        positions, offsets, at = [], [], 0
        for tail in tails:
            offsets.append(at)
            for j in range(len(tail)):
                mask[at + j, past + at : past + at + j + 1] = 0.0
                positions.append(past + j)
            at += len(tail)
        try:
            with torch.inference_mode():
                out = self.model(
                    input_ids=torch.tensor([flat], dtype=torch.long),
                    attention_mask=mask[None, None],
                    position_ids=torch.tensor([positions], dtype=torch.long),
                    past_key_values=self._cache,
                    use_cache=True,
                )
        finally:
            self._cache.crop(past - self._cache.get_seq_length())  # drop the tails again
        rows = log_softmax(out.logits[0])
        return [rows[o : o + len(tail)] for o, tail in zip(offsets, tails, strict=True)]

    def _batched_rows(self, tails: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """As `_tree_rows`, one right-padded row per tail on a copy of the cache (any cache type)."""
        width = max(len(t) for t in tails)
        batch = torch.zeros((len(tails), width), dtype=torch.long)
        for row, tail in enumerate(tails):
            batch[row, : len(tail)] = torch.tensor(tail)
        cache = copy.deepcopy(self._cache)
        cache.batch_repeat_interleave(len(tails))
        with torch.inference_mode():
            out = self.model(input_ids=batch, past_key_values=cache, use_cache=True)
        rows = log_softmax(out.logits)
        return [rows[r, : len(tail)] for r, tail in enumerate(tails)]


def _plain_cache(cache: DynamicCache) -> bool:
    """Every layer a plain full-attention `DynamicLayer` (a tree mask and a crop are exact there)."""
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


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
