"""A merged forward of several sequences leaves each one exactly where its own forward would: the
same rows (to float rounding) and a cache that goes on identically through pushes and rollbacks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from specsteer.core.kv import TokenSequence
from specsteer.server.kv_batch import forward_batch, merge_blocker
from tests.tinymodels import tiny_gemma, tiny_llama

ATOL = 1e-5


class Stash:
    """A runner that hands out logits a merged forward already computed (and cached) for a sequence."""

    def __init__(self) -> None:
        self.logits: dict[int, torch.Tensor] = {}

    def __call__(self, seq: TokenSequence, new: Sequence[int]) -> torch.Tensor:
        return self.logits.pop(id(seq))


def merged_sync(seqs: Sequence[TokenSequence], stash: Stash) -> int:
    """Feed every sequence's pending ids in one merged forward; returns how many took part."""
    pending = [(seq, seq.ids[seq.cached :]) for seq in seqs if seq.cached < len(seq)]
    for (seq, _), logits in zip(pending, forward_batch(pending), strict=True):
        stash.logits[id(seq)] = logits
        seq.next_logprobs()  # _sync takes the stashed logits and stores its rows
    assert not stash.logits
    return len(pending)


def twins(model, prefixes: Sequence[Sequence[int]]) -> tuple[list[TokenSequence], list[TokenSequence], Stash]:
    stash = Stash()
    alone = [TokenSequence(model, p) for p in prefixes]
    merged = [TokenSequence(model, p, stash) for p in prefixes]
    return alone, merged, stash


def assert_same(alone: Sequence[TokenSequence], merged: Sequence[TokenSequence], since: Sequence[int]) -> None:
    """Every kept row from `since[i]` on agrees, and so do the caches' lengths."""
    for a, b, start in zip(alone, merged, since, strict=True):
        assert a.ids == b.ids
        for n in range(start, len(a) + 1):  # reading a row runs `a`'s own forward, if due
            torch.testing.assert_close(b.logprobs_at(n), a.logprobs_at(n), atol=ATOL, rtol=0)
        assert a.cached == b.cached
        for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
            assert la.keys.shape == lb.keys.shape
            assert getattr(la, "cumulative_length", None) == getattr(lb, "cumulative_length", None)
            torch.testing.assert_close(lb.keys, la.keys, atol=ATOL, rtol=0)


def step(seqs: Sequence[TokenSequence], pushes: Sequence[Sequence[int]]) -> list[int]:
    """Push each sequence's tokens; returns where each one's new rows start."""
    starts = []
    for seq, tokens in zip(seqs, pushes, strict=True):
        starts.append(len(seq))
        seq.push(tokens)
    return starts


@pytest.fixture(scope="module")
def llama(char_tok):
    return tiny_llama(char_tok, seed=3)


def test_merged_forwards_match_each_sequences_own_through_pushes_and_rollbacks(llama) -> None:
    # Prepare: four sequences with different prompt lengths.
    prefixes = [[5, 6, 7], [10, 11, 12, 13, 14, 15, 16], [20], list(range(30, 42))]
    alone, merged, stash = twins(llama, prefixes)
    # Execute and assert: a merged prefill (no past at all; a prompt's last row is the one kept),
    # then rounds of different lengths.
    assert merged_sync(merged, stash) == 4
    assert_same(alone, merged, [len(p) for p in prefixes])
    for pushes in ([[40, 41], [42], [43, 44, 45, 46], [47, 48, 49]], [[50], [51, 52, 53], [54, 55], [56]]):
        starts = step(alone, pushes)
        step(merged, pushes)
        assert merged_sync(merged, stash) == 4
        assert_same(alone, merged, starts)
    # Roll back: into the last block (a kept row), and behind it (the last token is fed again).
    for seqs in (alone, merged):
        seqs[0].truncate(len(seqs[0]) - 1)
        seqs[1].truncate(len(seqs[1]) - 3)
        seqs[2].truncate(len(seqs[2]) - 2)
    passes_before = [s.forward_passes for s in merged]
    pushes = [[60, 61, 62], [63], [64, 65], [66, 67]]
    starts = step(alone, pushes)
    step(merged, pushes)
    assert merged_sync(merged, stash) == 4
    assert_same(alone, merged, starts)
    assert [s.forward_passes - p for s, p in zip(merged, passes_before, strict=True)] == [1, 1, 1, 1]


def test_merged_prefills_run_the_lm_head_at_each_prompts_last_column_only(llama) -> None:
    """Finding: a merged forward ran the LM head at every column of every row, so sessions opening
    together held batch x longest prompt x vocabulary logits (8 prompts of 600 tokens over a 152k
    vocabulary: 2.9 GB in fp32) to read one row each."""
    # Prepare: three prompts of different lengths; count the columns the LM head sees.
    prefixes = [[5, 6, 7], [10, 11, 12, 13, 14, 15, 16], list(range(30, 42))]
    alone, merged, stash = twins(llama, prefixes)
    columns: list[int] = []
    hook = llama.lm_head.register_forward_hook(lambda _m, _i, out: columns.append(out.shape[-2]))
    try:
        # Execute
        assert merged_sync(merged, stash) == 3
    finally:
        hook.remove()
    # Assert: one column a prompt (its last), each row its own forward's.
    assert columns == [3]
    assert_same(alone, merged, [len(p) for p in prefixes])


def test_a_merged_forward_can_mix_prefills_with_cached_sequences(llama) -> None:
    # Prepare: one sequence with a cached past, two new sessions' prompts (no cache yet).
    alone, merged, stash = twins(llama, [[5, 6, 7, 8], [9, 10], [70, 71, 72]])
    alone[0].next_logprobs()
    merged_sync(merged[:1], stash)
    starts = step(alone[:1], [[11, 12]])
    step(merged[:1], [[11, 12]])
    # Execute
    assert merged_sync(merged, stash) == 3
    # Assert
    assert_same(alone, merged, [starts[0], 2, 3])


def test_gemma_sliding_window_layers_merge_while_the_past_is_inside_the_window(char_tok) -> None:
    # Prepare: a window of 8; one row's past + new crosses it, which the padded mask must honour.
    gemma = tiny_gemma(char_tok, seed=0, window=8)
    alone, merged, stash = twins(gemma, [[5, 6, 7], [10, 11, 12, 13, 14, 15], [20]])
    assert merged_sync(merged, stash) == 3
    for s in alone:
        s.next_logprobs()
    starts = step(alone, [[30, 31], [32, 33, 34, 35, 36], [37]])
    step(merged, [[30, 31], [32, 33, 34, 35, 36], [37]])
    # Execute
    assert all(merge_blocker(s) is None for s in merged)
    merged_sync(merged, stash)
    # Assert: row 2 now has 11 tokens (past 6 + 5 new) against a window of 8.
    assert_same(alone, merged, starts)
    merged[1].truncate(len(merged[1]) - 1)
    alone[1].truncate(len(alone[1]) - 1)
    # Its past reached the window and a crop trimmed the sliding layers: it can no longer merge.
    assert merge_blocker(merged[1]) == "window" and merge_blocker(merged[0]) is None
    merged[1].push([40])
    with pytest.raises(ValueError, match="cannot join a merged forward \\(window\\)"):
        forward_batch([(merged[1], [40])])


def test_forward_batch_refuses_what_it_cannot_reproduce(llama, char_tok) -> None:
    a, b = TokenSequence(llama, [5, 6]), TokenSequence(tiny_llama(char_tok, seed=4), [5, 6])
    with pytest.raises(ValueError, match="runs one model"):
        forward_batch([(a, [7]), (b, [7])])
    with pytest.raises(ValueError, match="at least one new id"):
        forward_batch([(a, [])])
    gemma = tiny_gemma(char_tok, seed=0, window=4)
    with pytest.raises(ValueError, match="exceed the sliding window of 4"):
        forward_batch([(TokenSequence(gemma, [5]), [6, 7, 8, 9, 10]), (TokenSequence(gemma, [5]), [6])])
    assert forward_batch([]) == []


def test_a_failed_merged_forward_leaves_every_cache_as_it_was(llama) -> None:
    # Prepare: one row carries an id outside the vocabulary, so the embedding lookup raises.
    seqs = [TokenSequence(llama, [5, 6, 7]), TokenSequence(llama, [8, 9])]
    for s in seqs:
        s.next_logprobs()
    lengths = [[layer.keys.shape[-2] for layer in s.cache.layers] for s in seqs]
    # Execute
    with pytest.raises(IndexError):
        forward_batch([(seqs[0], [10]), (seqs[1], [llama.config.vocab_size + 5])])
    # Assert
    assert [[layer.keys.shape[-2] for layer in s.cache.layers] for s in seqs] == lengths
