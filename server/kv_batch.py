"""Merged forwards of several sessions' sequences of one model: the verifier's batching kernel.

`forward_batch` runs the pending forwards of several `core.kv.TokenSequence`s of one model as one
padded forward and gives each cache exactly its own new entries back; `merge_blocker` says when a
sequence cannot join. `server/batching.py` decides who waits for whom. Cloud-only: the device
never batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from specsteer.core.kv import TokenSequence, model_device, recording_cache

__all__ = ["forward_batch", "merge_blocker", "sliding_window"]


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
        if type(layer) is DynamicLayer:
            if _held(layer) != seq.cached:
                return "cache"
        elif type(layer) is DynamicSlidingWindowLayer:
            if seq.cached >= layer.sliding_window or _held(layer) != seq.cached:
                return "window"
        else:  # quantized, offloaded, linear-attention, ...: no known way to pad them
            return "cache"
    return None


def _held(layer: DynamicLayer) -> int:
    """How many positions `layer` holds."""
    return layer.keys.shape[-2] if layer.is_initialized and layer.keys is not None else 0


def _kv_layer(layer: object) -> DynamicLayer:
    """`layer` as a key/value layer: `merge_blocker` admits only those (full or sliding-window
    attention), and a merged cache has its model's kinds of layers."""
    if not isinstance(layer, DynamicLayer):
        raise TypeError(f"a merged forward holds key/value layers only, not {type(layer).__name__}")
    return layer


def _key_values(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values of a key/value layer that holds some (a row with a past)."""
    kv = _kv_layer(layer)
    if kv.keys is None or kv.values is None:
        raise RuntimeError("a row with a past has a cache layer without states")
    return kv.keys, kv.values


def forward_batch(items: Sequence[tuple[TokenSequence, Sequence[int]]]) -> list[torch.Tensor]:
    """One padded forward for several sequences of one model, each with some new ids.

    Returns each sequence's logits (its `rows_wanted()` last rows, as `single_forward` would) and appends to
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
    device = model_device(model)
    # Each row's readable rows (a prompt's last, a block's every one), by column: the LM head runs at
    # those columns only, not at every column of every row (8 merged prefills of 600 tokens over a
    # 152k vocabulary would be 2.9 GB of fp32 logits for the 8 rows read).
    wanted = [range(n - seq.rows_wanted(), n) for (seq, _), n in zip(items, lengths, strict=True)]
    columns = sorted({column for rows in wanted for column in rows})
    at = {column: j for j, column in enumerate(columns)}
    with torch.inference_mode():
        out = model(
            input_ids=_padded_ids(items, width).to(device),
            attention_mask=_padding_mask(pasts, lengths, longest, width).to(device),
            position_ids=torch.tensor([[p + j for j in range(width)] for p in pasts], dtype=torch.long, device=device),
            past_key_values=merged,
            use_cache=True,
            logits_to_keep=torch.tensor(columns, dtype=torch.long, device=device),
        )
        _split_cache(merged, [seq.cache for seq, _ in items], lengths, longest + width)
    # A row's columns are consecutive among those kept: a slice (a view, as before), not a gathered copy.
    return [out.logits[i, at[rows.start] : at[rows.start] + len(rows)] for i, rows in enumerate(wanted)]


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
    merged = recording_cache(model)
    if longest == 0:
        return merged
    for index, layer in enumerate(merged.layers):
        rows = [cache.layers[index] for cache in caches]
        like_keys, like_values = next(_key_values(row) for row, past in zip(rows, pasts, strict=True) if past)
        _, heads, _, key_dim = like_keys.shape
        keys = like_keys.new_zeros((len(rows), heads, longest, key_dim))
        values = like_values.new_zeros((len(rows), heads, longest, like_values.shape[-1]))
        for i, (row, past) in enumerate(zip(rows, pasts, strict=True)):
            if past:
                row_keys, row_values = _key_values(row)
                keys[i, :, longest - past :] = row_keys[0]
                values[i, :, longest - past :] = row_values[0]
        # Through `update`, as the model would fill it: a recording sliding layer keeps it all.
        _kv_layer(layer).update(keys, values)
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
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in merged.layers:
        kv = _kv_layer(layer)
        if kv.keys is None or kv.values is None or kv.keys.shape[-2] != total:
            raise RuntimeError("the merged cache did not keep every state of the batch")
        kept.append((kv.keys, kv.values))
    start = total - max(lengths)
    for index, (keys, values) in enumerate(kept):
        for i, (cache, n) in enumerate(zip(caches, lengths, strict=True)):
            # `update` copies (torch.cat), so no row keeps the padded batch tensors alive.
            _kv_layer(cache.layers[index]).update(
                keys[i : i + 1, :, start : start + n], values[i : i + 1, :, start : start + n]
            )
