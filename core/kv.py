"""A causal LM's KV cache over a growing token sequence, with rollback.

Device and cloud both keep one per model per session. Tokens are pushed lazily and fed in one
forward pass when a distribution is needed, so a verify block of K drafts costs one pass, and
rolling back to an accepted prefix costs nothing when that prefix's distribution is known.

Who runs a forward is injectable: by default `single_forward` (one sequence on its own cache);
the verifier injects a runner that merges the pending forwards of concurrent sessions of one
model into one padded forward (`server/kv_batch.py`, scheduled by `server/batching.py`), which
leaves each sequence's cache and rows as its own forward would, up to float rounding.

The bookkeeping (rows kept, rollback, continuation scoring) is `core.sequence.CachedSequence`,
which needs no torch; `TensorSequence` keeps its rows as torch tensors, and `TokenSequence` runs it
on a Hugging Face model. The device's drafters (`sdk/onnx_drafter.py`, `sdk/llamacpp.py`) keep
numpy rows.

The model may sit on a GPU in any dtype: its inputs are built on its device, its rows stay there
as fp32 log-probabilities, and a caller reads a block's few values back at once (`block_logprobs`)
rather than one synchronising scalar a token.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from specsteer.core.sequence import CachedSequence
from specsteer.core.steering import log_softmax

__all__ = [
    "CachedSequence",
    "ForwardRunner",
    "TensorSequence",
    "TokenSequence",
    "model_device",
    "recording_cache",
    "single_forward",
]

ForwardRunner = Callable[["TokenSequence", Sequence[int]], torch.Tensor]
"""Feeds `new` ids to `seq.model` after `seq.cache` (which covers `seq.ids[:seq.cached]`), appends
their KV entries to that cache, and returns their logits, shape [len(new), vocab]."""


class TensorSequence(CachedSequence[torch.Tensor]):
    """A `CachedSequence` whose rows are torch tensors, on whatever device the model's logits are:
    the Hugging Face models' sequences (`TokenSequence`, the slot pool's `SlotSequence`)."""

    def _log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        return log_softmax(logits)

    def _vector(self, values: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
        return torch.stack(values) if values else like.new_zeros(0)

    def block_logprobs(
        self, start: int, tokens: Sequence[int], *, best: bool = True
    ) -> tuple[list[float], list[int], list[float]]:
        """For each j: log P(tokens[j] | ids[:start + j]) and, with `best`, the most likely token
        there (the first on ties) and its log-probability (else two empty lists), read back from
        the rows' device in one copy (the verifier's blocks; device rows are never read this way).
        Each log-probability is a view of its row picked by a host index, so only the picked values
        and the maxima are gathered: no row is copied, and no index is sent to the device."""
        if not tokens:
            return [], [], []
        rows = [self.logprobs_at(start + j) for j in range(len(tokens))]
        picked = torch.stack([row[int(t)] for row, t in zip(rows, tokens, strict=True)])
        if not best:
            return picked.tolist(), [], []
        # One readback for all three: float64 holds every fp32 value and every token index exactly.
        top = torch.stack(rows).max(dim=-1)
        read = torch.cat([picked.double(), top.indices.double(), top.values.double()]).tolist()
        n = len(tokens)
        return read[:n], [int(i) for i in read[n : 2 * n]], read[2 * n :]


class TokenSequence(TensorSequence):
    """A sequence on a Hugging Face model's `DynamicCache`; a forward computes the rows that can be
    read (`rows_wanted`: a block's every row, a prompt's last)."""

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
            logits_to_keep=seq.rows_wanted(),  # a prompt's prefill: its last row only
        )
    return out.logits[0]
