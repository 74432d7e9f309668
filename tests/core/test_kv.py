"""KV-cached sequences agree with plain full forward passes, through pushes, rollbacks and scoring."""

from __future__ import annotations

import pytest
import torch

from specsteer.core.kv import TokenSequence
from specsteer.core.steering import log_softmax
from tests.tinymodels import tiny_llama


def full(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return log_softmax(model(torch.tensor([ids])).logits[0])


@pytest.fixture(scope="module")
def model(char_tok):
    return tiny_llama(char_tok, seed=3)


def test_rows_match_a_full_forward_after_push_and_rollback(model) -> None:
    # Prepare
    seq = TokenSequence(model, [5, 6, 7])
    seq.push([8, 9, 10, 11])
    # Execute: read every row, roll back into the block, then push something else.
    rows = [seq.logprobs_at(n) for n in range(3, 8)]
    seq.truncate(5)
    seq.push([20, 21])
    after = seq.next_logprobs()
    # Assert
    reference = full(model, [5, 6, 7, 8, 9, 10, 11])
    for n, row in zip(range(3, 8), rows, strict=True):
        torch.testing.assert_close(row, reference[n - 1], atol=1e-5, rtol=0)
    torch.testing.assert_close(after, full(model, [5, 6, 7, 8, 9, 20, 21])[-1], atol=1e-5, rtol=0)
    assert seq.ids == [5, 6, 7, 8, 9, 20, 21]
    assert seq.forward_passes == 2  # one block, then the two new tokens: the rollback re-fed nothing


def test_a_prompts_prefill_computes_its_last_row_only(model) -> None:
    """Finding: a prefill computed, log-softmaxed and kept the distribution after every prompt
    token, where only the last is ever read (rollbacks never go behind the prompt). For the demo
    user's 657-token device prompt and a 152k vocabulary that was 400 MB of logits and as much of
    log-probabilities, and about a quarter of the default Specialist's prefill (bench.prefill_rows)."""
    # Prepare: count the rows the LM head computes.
    prompt = list(range(5, 25))
    computed: list[int] = []
    hook = model.lm_head.register_forward_hook(lambda _m, _i, out: computed.append(out.shape[-2]))
    try:
        seq = TokenSequence(model, prompt)
        # Execute: the prefill, then a 4-token block after it.
        first = seq.next_logprobs()
        seq.push([30, 31, 32, 33])
        block = [seq.logprobs_at(n) for n in range(len(prompt) + 1, len(prompt) + 5)]
    finally:
        hook.remove()
    # Assert: one row for the prompt, every row of the block, each the full forward's.
    assert computed == [1, 4]
    reference = full(model, [*prompt, 30, 31, 32, 33])
    torch.testing.assert_close(first, reference[len(prompt) - 1], atol=1e-5, rtol=0)
    for j, row in enumerate(block):
        torch.testing.assert_close(row, reference[len(prompt) + j], atol=1e-5, rtol=0)
    with pytest.raises(IndexError, match="no distribution kept"):
        seq.logprobs_at(len(prompt) - 1)


def test_block_logprobs_reads_the_drafts_and_the_argmaxes_in_one_copy(model, monkeypatch) -> None:
    """A verify block's log-probabilities of the drafted tokens and, when asked, P's greedy token
    and its log-probability at each position, as a full forward gives them; read back to the host
    once (`tolist`)."""
    seq = TokenSequence(model, [5, 6, 7])
    draft = [8, 9, 10, 11]
    seq.push(draft)
    reads: list[int] = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: reads.append(t.numel()) or tolist(t))
    logps, best, top = seq.block_logprobs(3, draft)
    plain, none, no_top = seq.block_logprobs(3, draft, best=False)
    reference = full(model, [5, 6, 7, *draft])
    want = [float(reference[2 + j, t]) for j, t in enumerate(draft)]
    assert logps == pytest.approx(want, abs=1e-5) and plain == pytest.approx(want, abs=1e-5)
    assert best == [int(reference[2 + j].argmax()) for j in range(len(draft))] and none == [] == no_top
    assert top == pytest.approx([float(reference[2 + j].max()) for j in range(len(draft))], abs=1e-5)
    # One copy each: values, argmaxes and maxima together, then values alone.
    assert reads == [3 * len(draft), len(draft)]


def test_truncate_to_a_point_without_a_kept_row_refeeds_one_token(model) -> None:
    seq = TokenSequence(model, [5, 6, 7, 8])
    seq.next_logprobs()
    seq.truncate(4)  # row 4 is kept: no pass
    passes = seq.forward_passes
    seq.next_logprobs()
    assert seq.forward_passes == passes
    seq.truncate(2)  # row 2 was dropped at the first truncation: the last token is fed again
    torch.testing.assert_close(seq.next_logprobs(), full(model, [5, 6])[-1], atol=1e-5, rtol=0)
    assert seq.forward_passes == passes + 1


def test_rollback_behind_the_last_truncation_point_is_refused(model) -> None:
    seq = TokenSequence(model, [5, 6, 7, 8])
    seq.next_logprobs()
    seq.truncate(3)
    with pytest.raises(IndexError, match="no distribution kept"):
        seq.logprobs_at(2)
    with pytest.raises(IndexError, match="cannot truncate"):
        seq.truncate(9)


def test_score_continuations_sums_log_probs_of_multi_token_strings(model) -> None:
    seq = TokenSequence(model, [5, 6, 7])
    conts = [(9,), (10, 11), (12, 13, 14)]
    scores = seq.score_continuations(conts)
    for cont, score in zip(conts, scores, strict=True):
        ref = full(model, [5, 6, 7, *cont])
        expected = sum(float(ref[2 + j][t]) for j, t in enumerate(cont))
        assert float(score) == pytest.approx(expected, abs=1e-4)
    assert seq.ids == [5, 6, 7]  # scoring leaves the sequence as it was
    torch.testing.assert_close(seq.next_logprobs(), full(model, [5, 6, 7])[-1], atol=1e-5, rtol=0)


def test_empty_prefix_is_refused(model) -> None:
    with pytest.raises(ValueError, match="at least one prefix token"):
        TokenSequence(model, [])


def test_sliding_window_layers_roll_back_past_the_window(char_tok) -> None:
    # Prepare: a tiny Gemma 3 (the embedded Generalist's architecture) with a 4-token window.
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=len(char_tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    gemma = Gemma3ForCausalLM(config).eval()
    ids = list(range(10, 22))
    seq = TokenSequence(gemma, ids[:6])
    # Execute: verify-style blocks and rollbacks well past the window.
    seq.push(ids[6:10])
    seq.next_logprobs()
    seq.truncate(8)
    seq.push([40, 41, 42])
    got = seq.next_logprobs()
    seq.truncate(9)
    got_after_second = seq.next_logprobs()
    # Assert
    torch.testing.assert_close(got, full(gemma, [*ids[:8], 40, 41, 42])[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(got_after_second, full(gemma, [*ids[:8], 40])[-1], atol=1e-5, rtol=0)
