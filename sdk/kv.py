"""A causal LM's KV cache over a growing token sequence, with rollback.

Device and cloud both keep one per model per session. Tokens are pushed lazily and fed in one
forward pass when a distribution is needed, so a verify block of K drafts costs one pass, and
rolling back to an accepted prefix costs nothing when that prefix's distribution is known.

Who runs a forward is injectable: by default `single_forward` (one sequence on its own cache);
the verifier injects a runner that merges the pending forwards of concurrent sessions of one
model into one padded `forward_batch` (`server/batching.py`), which leaves each sequence's cache
and rows as its own forward would, up to float rounding.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from sdk.steering import log_softmax

__all__ = ["ForwardRunner", "TokenSequence", "forward_batch", "merge_blocker", "single_forward", "sliding_window"]

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
        return _recording_cache(self.model)

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


def _recording_cache(model: PreTrainedModel) -> DynamicCache:
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


# -- merged forwards of several sequences of one model -----------------------------------------------


def sliding_window(seq: TokenSequence) -> int | None:
    """The smallest sliding window among `seq`'s cache layers (None: all attend to everything)."""
    windows = [layer.sliding_window for layer in seq.cache.layers if isinstance(layer, DynamicSlidingWindowLayer)]
    return min(windows) if windows else None


def merge_blocker(seq: TokenSequence) -> str | None:
    """Why `seq`'s next forward cannot join `forward_batch` ("cache" or "window"); None if it can.

    The merged forward left-pads each row's past to the longest one and masks the padding. That
    reproduces the row's own forward for full-attention layers, and for sliding-window layers
    (Gemma 3) while they still hold the row's whole past and it is shorter than the window: then
    no state has been dropped, and the window's distance rule is the same in padded positions.
    """
    layers = seq.cache.layers
    if not layers or getattr(seq.model.config, "use_bidirectional_attention", False):
        return "cache"
    for layer in layers:
        held = layer.keys.shape[-2] if layer.is_initialized and layer.keys is not None else 0
        if type(layer) is DynamicLayer:
            if held != seq.cached:
                return "cache"
        elif type(layer) is DynamicSlidingWindowLayer:
            if seq.cached >= layer.sliding_window or held != seq.cached:
                return "window"
        else:  # quantized, offloaded, linear-attention, ...: no known way to pad them
            return "cache"
    return None


def forward_batch(items: Sequence[tuple[TokenSequence, Sequence[int]]]) -> list[torch.Tensor]:
    """One padded forward for several sequences of one model, each with some new ids.

    Returns each sequence's logits ([len(new), vocab], as `single_forward` would) and appends to
    each sequence's own cache exactly its new KV entries. Rows' caches are written only after the
    forward succeeded, so a failure leaves every sequence as it was. Every sequence must pass
    `merge_blocker`, and no row may have more new ids than the sliding window (a padded query
    would then see no token at all, and its NaN would reach the other rows through the values).
    """
    if not items:
        return []
    model = items[0][0].model
    _check_mergeable(items, model)
    pasts = [seq.cached for seq, _ in items]
    lengths = [len(new) for _, new in items]
    longest, width = max(pasts), max(lengths)
    merged = _merged_cache(model, [seq.cache for seq, _ in items], pasts, longest)
    with torch.inference_mode():
        out = model(
            input_ids=_padded_ids(items, width),
            attention_mask=_padding_mask(pasts, lengths, longest, width),
            position_ids=torch.tensor([[p + j for j in range(width)] for p in pasts], dtype=torch.long),
            past_key_values=merged,
            use_cache=True,
        )
        _split_cache(merged, [seq.cache for seq, _ in items], lengths, longest + width)
    return [out.logits[i, :n] for i, n in enumerate(lengths)]


def _check_mergeable(items: Sequence[tuple[TokenSequence, Sequence[int]]], model: PreTrainedModel) -> None:
    for seq, new in items:
        if seq.model is not model:
            raise ValueError("a merged forward runs one model: every sequence must use it")
        if not new:
            raise ValueError("every sequence of a merged forward needs at least one new id")
        reason = merge_blocker(seq)
        if reason is not None:
            raise ValueError(f"a sequence of {seq.cached} cached tokens cannot join a merged forward ({reason})")
    window = sliding_window(items[0][0])
    width = max(len(new) for _, new in items)
    if window is not None and width > window:
        raise ValueError(f"{width} new ids in one row exceed the sliding window of {window}")


def _merged_cache(
    model: PreTrainedModel, caches: Sequence[DynamicCache], pasts: Sequence[int], longest: int
) -> DynamicCache:
    """A fresh cache of len(caches) rows: each row's past, left-padded with zeros to `longest`."""
    merged = _recording_cache(model)
    if longest == 0:
        return merged
    for index, layer in enumerate(merged.layers):
        rows = [cache.layers[index] for cache in caches]
        like = next(row for row, past in zip(rows, pasts, strict=True) if past)
        _, heads, _, key_dim = like.keys.shape
        keys = like.keys.new_zeros((len(rows), heads, longest, key_dim))
        values = like.values.new_zeros((len(rows), heads, longest, like.values.shape[-1]))
        for i, (row, past) in enumerate(zip(rows, pasts, strict=True)):
            if past:
                keys[i, :, longest - past :] = row.keys[0]
                values[i, :, longest - past :] = row.values[0]
        # Through `update`, as the model would fill it: a recording sliding layer keeps it all.
        layer.update(keys, values)
    return merged


def _padded_ids(items: Sequence[tuple[TokenSequence, Sequence[int]]], width: int) -> torch.Tensor:
    # Right padding with id 0 (in every vocabulary): masked out as keys, its outputs are dropped.
    ids = torch.zeros((len(items), width), dtype=torch.long)
    for i, (_, new) in enumerate(items):
        ids[i, : len(new)] = torch.tensor(list(new), dtype=torch.long)
    return ids


def _padding_mask(pasts: Sequence[int], lengths: Sequence[int], longest: int, width: int) -> torch.Tensor:
    """1 where a row has a real token: its past (right-aligned to `longest`), then its new ids."""
    mask = torch.zeros((len(pasts), longest + width), dtype=torch.long)
    for i, (past, n) in enumerate(zip(pasts, lengths, strict=True)):
        mask[i, longest - past : longest + n] = 1
    return mask


def _split_cache(merged: DynamicCache, caches: Sequence[DynamicCache], lengths: Sequence[int], total: int) -> None:
    """Append each row's new entries (after the padded past, before the right padding) to its cache."""
    for layer in merged.layers:
        if layer.keys is None or layer.keys.shape[-2] != total:
            raise RuntimeError("the merged cache did not keep every state of the batch")
    start = total - max(lengths)
    for index, layer in enumerate(merged.layers):
        for i, (cache, n) in enumerate(zip(caches, lengths, strict=True)):
            # `update` copies (torch.cat), so no row keeps the padded batch tensors alive.
            cache.layers[index].update(
                layer.keys[i : i + 1, :, start : start + n], layer.values[i : i + 1, :, start : start + n]
            )
