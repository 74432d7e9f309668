"""The slot pool (issue 27's lean verify path) held to transformers' own logits on tiny models:
sessions at different lengths in one forward, padded blocks, idle slots, rollback by length, and
the in-graph round math against `core.steering`. On the CPU here; on CUDA (fp32, CUDA graphs)
where there is a GPU (tools/gpu_check.sh runs it)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from specsteer.core.kv import TokenSequence
from specsteer.core.session_types import CandidatePolicy
from specsteer.core.steering import RULED_OUT, steering_candidates, steering_values
from specsteer.server.errors import SlotPoolTooLarge
from specsteer.server.slot_pool import (
    GRAPH_MAX_N,
    GRAPH_MIN_WINDOW,
    SlotKV,
    SlotLease,
    SlotOverflow,
    SlotPool,
    folded_gqa_attention,
    kv_bytes,
    round_outputs,
)
from tests.tinymodels import char_tokenizer, perturbed_copy, tiny_gemma, tiny_lm

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (tools/gpu_check.sh runs it)")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
ATOL = 2e-4


def reference_logits(model: PreTrainedModel, ids: list[int]) -> torch.Tensor:
    """Every row of one plain forward over `ids` (transformers' own path, its own cache)."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=next(model.parameters()).device), use_cache=True)
    return out.logits[0].float().cpu()


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return char_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    return tiny_lm(tokenizer, seed=3, kv_heads=2).model


@pytest.fixture(params=DEVICES)
def placed(model: PreTrainedModel, request: pytest.FixtureRequest) -> Iterator[PreTrainedModel]:
    """The tiny model on each device of `DEVICES` in turn (back on the CPU afterwards)."""
    yield model.to(torch.device(request.param))
    model.to(torch.device("cpu"))


def texts(tokenizer: PreTrainedTokenizerFast, *words: str) -> list[list[int]]:
    return [tokenizer(w, add_special_tokens=False)["input_ids"] for w in words]


def assert_sessions_match_transformers(model: PreTrainedModel, pool: SlotPool, prompts: list[list[int]]) -> None:
    """Three sessions prefilled apart, then one bucket with blocks of 3, 1 (padded) and 2 (padded)
    real tokens (the fourth slot idle), then a rollback by length: each row held to transformers'
    forward over the whole text. Also the pool's own forward's check (tests/server/test_fused_decoder.py)."""
    slots = [pool.claim() for _ in prompts]
    assert slots == [0, 1, 2]
    for slot, prompt in zip(slots, prompts, strict=True):  # prefill one at a time: the others idle
        logits = pool.forward({slot: prompt}, bucket=3, n=len(prompt)).float().cpu()
        torch.testing.assert_close(logits[slot], reference_logits(model, prompt), atol=ATOL, rtol=0)
    blocks = {0: [20, 21, 22], 1: [23], 2: [24, 25]}
    logits = pool.forward(blocks, bucket=4, n=3).float().cpu()
    for slot, block in blocks.items():
        want = reference_logits(model, prompts[slot] + block)[-len(block) :]
        torch.testing.assert_close(logits[slot, : len(block)], want, atol=ATOL, rtol=0)
        assert pool.lengths[slot] == len(prompts[slot]) + len(block)
    pool.set_length(0, len(prompts[0]) + 1)  # two of three rejected: the next block overwrites them
    logits = pool.forward({0: [26, 27]}, bucket=1, n=2).float().cpu()
    want = reference_logits(model, [*prompts[0], 20, 26, 27])[-2:]
    torch.testing.assert_close(logits[0], want, atol=ATOL, rtol=0)


def test_sessions_at_different_lengths_share_a_forward(
    placed: PreTrainedModel, tokenizer: PreTrainedTokenizerFast
) -> None:
    prompts = texts(tokenizer, "the cat sat", "a much longer opening line", "hi")
    assert_sessions_match_transformers(placed, SlotPool(placed, slots=4, max_len=64), prompts)


def test_rollback_is_a_length_and_idle_slots_keep_their_kv(
    placed: PreTrainedModel, tokenizer: PreTrainedTokenizerFast
) -> None:
    pool = SlotPool(placed, slots=2, max_len=48)
    a, b = pool.claim(), pool.claim()
    prompt_a, prompt_b = texts(tokenizer, "draft and verify", "steer")
    pool.forward({a: prompt_a}, bucket=2, n=len(prompt_a))
    pool.forward({b: prompt_b}, bucket=2, n=len(prompt_b))
    rejected = [11, 12, 13, 14]
    pool.forward({a: rejected}, bucket=2, n=5)  # b idles through it
    pool.set_length(a, len(prompt_a) + 1)  # the ratio test kept one of the four
    kept = [*prompt_a, rejected[0]]
    logits = pool.forward({a: [20, 21], b: [22]}, bucket=2, n=5).float().cpu()
    torch.testing.assert_close(logits[a, :2], reference_logits(placed, [*kept, 20, 21])[-2:], atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[b, :1], reference_logits(placed, [*prompt_b, 22])[-1:], atol=ATOL, rtol=0)
    pool.release(a)
    assert pool.claim() == a and pool.lengths[a] == 0


def test_round_outputs_match_core_steering(tokenizer: PreTrainedTokenizerFast) -> None:
    """The in-graph numbers are the ones `CloudSession` derives from `TokenSequence` rows and
    `core.steering.steering_candidates` (guardrail), for every position a ratio test could stop at."""
    s0 = tiny_lm(tokenizer, seed=5)
    g = perturbed_copy(s0, seed=6)
    prompt = texts(tokenizer, "fix the parser")[0]
    block = [prompt[-1], 30, 31, 32, 33]  # the committed token, then four drafts
    context = prompt[:-1]
    pools = {name: SlotPool(lm.model, slots=1, max_len=32) for name, lm in (("g", g), ("s0", s0))}
    logits = {}
    for name, pool in pools.items():
        slot = pool.claim()
        pool.forward({slot: context}, bucket=1, n=len(context))
        logits[name] = pool.forward({slot: block}, bucket=1, n=len(block)).clone()
    alpha, k = 0.7, 6
    out = round_outputs(logits["g"], logits["s0"], torch.tensor([block]), alpha=alpha, k=k)
    seqs = {"g": TokenSequence(g.model, prompt), "s0": TokenSequence(s0.model, prompt)}
    for seq in seqs.values():
        seq.push(block[1:])
    g_logps, g_best, _ = seqs["g"].block_logprobs(len(prompt), block[1:])
    s0_logps, _, _ = seqs["s0"].block_logprobs(len(prompt), block[1:])
    want_ratios = torch.tensor([x - y for x, y in zip(g_logps, s0_logps, strict=True)])
    torch.testing.assert_close(out["log_ratios"][0], want_ratios, atol=ATOL, rtol=0)
    assert out["g_best"][0, :-1].tolist() == g_best
    for accepted in range(len(block)):
        n = len(prompt) + accepted
        ids, values = steering_candidates(
            seqs["g"].logprobs_at(n), seqs["s0"].logprobs_at(n), alpha=alpha, k=k, policy=CandidatePolicy.GUARDRAIL
        )
        assert out["top_ids"][0, accepted].tolist() == ids.tolist()
        torch.testing.assert_close(out["top_values"][0, accepted], values, atol=ATOL, rtol=0)


@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_round_outputs_follow_the_spec_where_a_model_rules_tokens_out(alpha: float) -> None:
    """A token P_G gives probability 0 is RULED_OUT (below every token P_G allows, whatever P_S^0
    says), log P_S^0 = -inf enters floored, and a NaN row is flagged for refusal: as
    `core.steering.steering_values` and `refuse_nan` do. The in-graph copy floored all three."""
    vocab, k = 12, 6
    g = torch.full((1, 2, vocab), float("-inf"))
    g[..., :3] = torch.tensor([2.0, 1.0, 0.5])  # P_G allows three tokens: the top 6 hold three it rules out
    s0 = torch.randn(1, 2, vocab)
    s0[..., 1] = float("-inf")  # P_S^0 rules out one token P_G allows
    out = round_outputs(g, s0, torch.tensor([[3, 1]]), alpha=alpha, k=k)
    for row in range(2):
        ids = out["top_ids"][0, row]
        want = steering_values(torch.log_softmax(g[0, row], -1), torch.log_softmax(s0[0, row], -1), alpha)[ids]
        torch.testing.assert_close(out["top_values"][0, row], want)
        assert (out["top_values"][0, row, 3:] == RULED_OUT).all()
    assert not out["nan"].any()
    s0[0, 1, 4] = float("nan")
    assert round_outputs(g, s0, torch.tensor([[3, 1]]), alpha=alpha, k=k)["nan"].tolist() == [True]


def test_qwen3_decoder_runs_on_the_pool(tokenizer: PreTrainedTokenizerFast) -> None:
    """The paper's Generalist family (per-head q/k norms) through the same protocol."""
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    pool = SlotPool(model, slots=2, max_len=40)
    pool.claim()
    slot = pool.claim()
    prompt = texts(tokenizer, "qwen three")[0]
    pool.forward({slot: prompt}, bucket=2, n=len(prompt))
    logits = pool.forward({slot: [7, 8]}, bucket=2, n=4).float()
    torch.testing.assert_close(logits[slot, :2], reference_logits(model, [*prompt, 7, 8])[-2:], atol=ATOL, rtol=0)


def test_on_a_gpu_blocks_are_padded_to_few_shapes_but_never_past_a_slot(model: PreTrainedModel) -> None:
    """`shape_for` is the GPU's padding policy (read on a CPU pool told it is on a GPU): buckets and
    blocks round up to powers of two, except where a slot's padding would run past its end."""
    pool = SlotPool(model, slots=8, max_len=20)
    pool.device = torch.device("cuda")  # the policy alone; nothing runs
    for _ in range(3):
        pool.claim()
    pool.set_length(2, 10)
    assert pool.shape_for({2: [1, 2, 3]}) == (4, 4, 20, True)  # slots under GRAPH_MIN_WINDOW: one window
    assert pool.shape_for({0: list(range(20))}) == (1, 20, 20, False)  # a prefill: exact, no graph
    pool.set_length(2, 17)  # 17 + 4 padded would pass 20: the block goes unpadded
    assert pool.shape_for({2: [1, 2, 3]}) == (4, 3, 20, True)


def test_on_a_gpu_windows_are_powers_of_two_up_to_the_whole_slot(model: PreTrainedModel) -> None:
    """A forward's window covers its longest session plus the block, rounded up to a power of two
    from GRAPH_MIN_WINDOW (so few graphs serve every length) and never past the slot."""
    pool = SlotPool(model, slots=4, max_len=1500)
    pool.device = torch.device("cuda")  # the policy alone; nothing runs
    assert pool.graph_windows() == [GRAPH_MIN_WINDOW, 2 * GRAPH_MIN_WINDOW, 4 * GRAPH_MIN_WINDOW, 1500]
    a, b = pool.claim(), pool.claim()
    pool.set_length(a, 10)
    assert pool.shape_for({a: [1, 2, 3]}) == (1, 4, GRAPH_MIN_WINDOW, True)
    pool.set_length(b, 2 * GRAPH_MIN_WINDOW - 2)  # + 4 padded passes 512: the next window
    assert pool.shape_for({a: [1], b: [1, 2, 3]}) == (2, 4, 4 * GRAPH_MIN_WINDOW, True)
    pool.set_length(b, 1400)
    assert pool.shape_for({b: [1, 2, 3, 4, 5]}) == (2, 8, 1500, True)
    shapes = pool.graph_shapes()
    for length in range(0, 1500, 7):
        pool.set_length(b, length)
        for n in (1, 3, 5, 9, 16):
            if length + (1 << (n - 1).bit_length()) <= 1500:  # its padding fits (else it has no graph)
                assert pool.shape_for({b: list(range(n))})[:3] in shapes


def test_a_forward_reads_only_the_columns_its_sessions_hold(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions far shorter than their slots: a round's forward attends over the longest one plus
    its block, not the whole slot (which a batched GPU replay would read from memory: for 64
    sessions of 512 tokens in 2048-token slots, four times the KV they hold), with transformers'
    logits, on transformers' forward and the pool's own."""
    attended: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query: torch.Tensor, key: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        attended.append(key.shape[-2])
        return sdpa(query, key, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    prompts = texts(tokenizer, "the cat sat", "a much longer opening line")
    for fused in (False, True):
        pool = SlotPool(model, slots=3, max_len=2048, fused=fused)
        slots = [pool.claim() for _ in prompts]
        for slot, prompt in zip(slots, prompts, strict=True):
            pool.run({slot: prompt})
        attended.clear()
        blocks = {slots[0]: [20, 21, 22], slots[1]: [23]}
        logits = pool.run(blocks)
        assert attended and max(attended) == len(prompts[1]) + 3  # the longest session and the block
        for slot, block in blocks.items():
            want = reference_logits(model, prompts[slot] + block)[-len(block) :]
            torch.testing.assert_close(logits[slot].float(), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("fused", [False, True], ids=["transformers", "fused"])
def test_a_prefill_computes_the_lm_head_over_the_rows_it_keeps_only(
    placed: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, fused: bool
) -> None:
    """A prompt's prefill hands back its last row, so the LM head (a vocabulary-wide product per
    position: 14 % of a 1.5B model's 657-token prefill on the CPU) runs over that row only;
    merged prefills of different lengths over every block's kept rows; a round's block over all
    of its rows. Each with transformers' logits."""
    heads: list[int] = []
    hook = placed.lm_head.register_forward_hook(lambda _m, args, _out: heads.append(args[0].shape[1]))
    try:
        pool = SlotPool(placed, slots=3, max_len=64, fused=fused)
        slots = [pool.claim() for _ in range(3)]
        long, short, alone = texts(tokenizer, "a longer opening", "a line", "hello there")
        (last,) = pool.run({slots[2]: alone}, {slots[2]: 1})
        assert heads == [1]
        torch.testing.assert_close(last.float().cpu(), reference_logits(placed, alone)[-1:], atol=ATOL, rtol=0)
        heads.clear()
        merged = pool.run({slots[0]: long, slots[1]: short}, {slots[0]: 1, slots[1]: 1})
        assert heads == [len(long) - len(short) + 1]  # from the shorter block's last row on
        for logits, prompt in zip(merged, (long, short), strict=True):
            torch.testing.assert_close(logits.float().cpu(), reference_logits(placed, prompt)[-1:], atol=ATOL, rtol=0)
        heads.clear()
        block = [20, 21, 22]
        (rows,) = pool.run({slots[2]: block})
        assert heads == [len(block)] and rows.shape[0] == len(block)
        want = reference_logits(placed, [*alone, *block])[-len(block) :]
        torch.testing.assert_close(rows.float().cpu(), want, atol=ATOL, rtol=0)
    finally:
        hook.remove()


def test_a_session_left_on_a_high_slot_moves_down_when_the_slots_below_it_free(
    placed: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forward covers every slot below its highest fed one: a session left alone on slot 2 would
    compute three rows a forward. When a lower slot frees, the highest session moves into it (its
    KV copied), so its next forward is a bucket of one, with transformers' logits; a slot from
    `claim` never moves; a released lease releases nothing twice."""
    pool = SlotPool(placed, slots=4, max_len=64)
    buckets: list[int] = []
    forward = pool.forward
    monkeypatch.setattr(
        pool, "forward", lambda blocks, bucket, *a, **kw: buckets.append(bucket) or forward(blocks, bucket, *a, **kw)
    )
    prompts = texts(tokenizer, "the first", "a second one", "and the third session")
    leases = [pool.lease() for _ in prompts]
    for lease, prompt in zip(leases, prompts, strict=True):
        pool.run({lease: prompt}, {lease: 1})
    last = leases[2]
    pool.release(leases[0])
    assert last.slot == 0 and leases[0].slot == -1 and pool.lengths[0] == len(prompts[2])
    pool.release(leases[1])
    pool.release(leases[0])  # again: nothing
    assert sorted(pool.free_slots()) == [1, 2, 3]
    buckets.clear()
    (logits,) = pool.run({last: [20, 21]})
    assert buckets == [1]
    torch.testing.assert_close(
        logits.float().cpu(), reference_logits(placed, [*prompts[2], 20, 21])[-2:], atol=ATOL, rtol=0
    )
    fixed, above = pool.claim(), pool.lease()
    assert (fixed, above.slot) == (1, 2)
    pool.release(last)  # slot 0 frees: the lease above moves down, the claimed slot stays
    assert above.slot == 0 and fixed == 1 and sorted(pool.free_slots()) == [2, 3]


def test_sessions_moved_while_others_open_and_close_keep_their_logits(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moves happen on whichever thread releases a slot: a session's forwards, run on another, see
    its KV where the pool put it (the lease is resolved under the pool's lock), every time."""
    pool = SlotPool(model, slots=6, max_len=96)
    prompts = texts(tokenizer, "first words", "a second, longer line", "third", "the fourth one here")
    wants = [reference_logits(model, [*prompt, 40])[-1] for prompt in prompts]
    moves = []
    move = pool._move
    monkeypatch.setattr(pool, "_move", lambda source, target: moves.append(source) or move(source, target))
    live: dict[SlotLease, int] = {}  # lease -> its prompt's index
    guard, busy, stop, errors = threading.Lock(), [None], threading.Event(), []

    def open_session(index: int) -> None:
        lease = pool.lease()
        pool.run({lease: prompts[index]}, {lease: 1})
        with guard:
            live[lease] = index

    for index in range(len(prompts)):
        open_session(index)

    def churn() -> None:  # close any session not being checked, open another in its place
        rng = random.Random(0)
        try:
            while not stop.is_set():
                with guard:
                    closable = [lease for lease in live if lease is not busy[0]]
                    lease = rng.choice(closable)
                    index = live.pop(lease)
                pool.release(lease)
                open_session(index)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=churn)
    thread.start()
    rng = random.Random(1)
    try:
        for _ in range(60):
            with guard:
                lease, index = rng.choice(list(live.items()))
                busy[0] = lease
            (logits,) = pool.run({lease: [40]})
            pool.set_length(lease, len(prompts[index]))  # the token rolled back: the same forward each time
            with guard:
                busy[0] = None
            torch.testing.assert_close(logits[0].float(), wants[index], atol=ATOL, rtol=0)
    finally:
        stop.set()
        thread.join()
    assert not errors and moves  # sessions did move, and none ever read another's KV


def test_a_release_from_inside_a_forward_waits_until_the_forward_is_done(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dropped session's finalizer may run on the thread that is inside the pool's forward (the
    garbage collector runs at any allocation, and the pool's lock is reentrant). Releasing then
    would move the forwarded session under it; the release is held until the forward returns."""
    pool = SlotPool(model, slots=3, max_len=64)
    first, second = texts(tokenizer, "dropped early", "still running")
    dropped, running = pool.lease(), pool.lease()
    pool.run({dropped: first}, {dropped: 1})
    pool.run({running: second}, {running: 1})
    block = pool.block

    def collected_mid_forward(*args: object, **kwargs: object) -> torch.Tensor:
        pool.release(dropped)  # as `weakref.finalize` would, from inside this forward
        return block(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "block", collected_mid_forward)
    (logits,) = pool.run({running: [40, 41]})
    torch.testing.assert_close(logits.float(), reference_logits(model, [*second, 40, 41])[-2:], atol=ATOL, rtol=0)
    # ...and once it returned, the release happened: the running session moved down into slot 0.
    assert dropped.slot == -1 and running.slot == 0 and pool.lengths[0] == len(second) + 2


def test_a_window_wider_than_needed_changes_no_logit(model: PreTrainedModel) -> None:
    """The columns past a session's length are closed by the mask whatever the window, so a
    graph's rounded-up window gives the exact window's logits; one too narrow is refused."""
    pool = SlotPool(model, slots=2, max_len=64)
    slot = pool.claim()
    pool.forward({slot: [5, 6, 7, 8, 9]}, bucket=2, n=5, window=5)
    exact = pool.forward({slot: [10, 11]}, bucket=2, n=2, window=7).clone()
    pool.set_length(slot, 5)
    wide = pool.forward({slot: [10, 11]}, bucket=2, n=2, window=40)
    torch.testing.assert_close(wide[slot], exact[slot], atol=ATOL, rtol=0)
    pool.set_length(slot, 5)
    with pytest.raises(ValueError, match="do not fit a 6-column window"):
        pool.forward({slot: [10, 11]}, bucket=1, n=2, window=6)
    with pytest.raises(ValueError, match=r"outside 1\.\.64"):
        pool.forward({slot: [10]}, bucket=1, n=1, window=65)


def test_every_graphed_shape_writes_its_logits_into_one_buffer(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast
) -> None:
    """On a GPU (here a CPU pool told to share), each graph's logits go to one pool-wide buffer,
    not a tensor per (bucket, n, window) held as long as its graph; each forward's still match
    transformers'. Blocks past GRAPH_MAX_N, never graphed by `run`, keep their own."""
    pool = SlotPool(model, slots=2, max_len=64)
    pool.shares_logits = True
    a, b = pool.claim(), pool.claim()
    (prompt,) = texts(tokenizer, "shared logits")
    first = pool.forward({a: prompt}, bucket=1, n=len(prompt), window=len(prompt))
    torch.testing.assert_close(first[0].clone(), reference_logits(model, prompt), atol=ATOL, rtol=0)
    second = pool.forward({a: [30, 31], b: [32]}, bucket=2, n=2, window=len(prompt) + 2)
    assert second.data_ptr() == first.data_ptr()
    torch.testing.assert_close(second[a], reference_logits(model, [*prompt, 30, 31])[-2:], atol=ATOL, rtol=0)
    torch.testing.assert_close(second[b, :1], reference_logits(model, [32]), atol=ATOL, rtol=0)
    long = list(range(1, GRAPH_MAX_N + 2))
    assert pool.forward({b: long}, bucket=2, n=len(long)).data_ptr() != first.data_ptr()


def test_a_pool_the_devices_free_memory_cannot_hold_is_refused_before_it_allocates(
    model: PreTrainedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU the KV buffers' allocation would fail partway with CUDA's out-of-memory traceback,
    and on a host the zeroed pages would be committed later, as sessions write them. Refused up
    front, in one sentence with the figures; what fits is allocated as before."""
    per_position = kv_bytes(model.config, 1, 0, torch.float32)
    assert per_position == 2 * model.config.num_hidden_layers * model.config.num_key_value_heads * 16 * 4
    allocated: list[tuple[int, ...]] = []
    zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *a, **kw: allocated.append(a[0]) or zeros(*a, **kw))
    monkeypatch.setattr("specsteer.server.slot_pool.available_bytes", lambda device: 10 * per_position)
    with pytest.raises(SlotPoolTooLarge, match=r"the KV slot pool of 4 slots x 8 positions needs 0\.0 GiB on cpu "):
        SlotPool(model, slots=4, max_len=8)
    assert not allocated
    SlotPool(model, slots=1, max_len=8)  # 9 positions with the scratch column: it fits
    assert allocated
    with pytest.raises(SlotPoolTooLarge, match=r"lower kv_slots \(--kv-slots\) or kv_max_len \(--kv-max-len\)$"):
        SlotPool(model, slots=2, max_len=8)


def test_refusals_are_one_sentence(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast) -> None:
    with pytest.raises(ValueError, match="sliding-window"):
        SlotKV(tiny_gemma(tokenizer, seed=1, window=4).config, 1, 8, torch.device("cpu"), torch.float32)
    pool = SlotPool(model, slots=1, max_len=8)
    slot = pool.claim()
    with pytest.raises(SlotOverflow, match="exceed the pool's 8"):
        pool.forward({slot: list(range(1, 10))}, bucket=1, n=9)
    with pytest.raises(SlotOverflow, match="exceed the pool's 8"):
        pool.run({slot: list(range(1, 10))})
    with pytest.raises(RuntimeError, match="all 1 KV slots are taken"):
        pool.claim()
    with pytest.raises(ValueError, match=r"outside 0\.\.8"):
        pool.set_length(slot, 9)


def test_folded_grouped_attention_equals_repeated_heads() -> None:
    """The fold (the group into the query length) gives sdpa's sums on repeated K/V heads, under a
    mask that differs per row and position."""
    torch.manual_seed(1)
    b, kv_heads, group, n, length, d = 3, 2, 4, 5, 11, 8
    query = torch.randn(b, kv_heads * group, n, d)
    key, value = torch.randn(b, kv_heads, length, d), torch.randn(b, kv_heads, length, d)
    mask = torch.rand(b, 1, n, length) > 0.4
    mask[..., 0] = True  # no all-closed row
    module = torch.nn.Module()
    got, _ = folded_gqa_attention(module, query, key, value, mask, scaling=0.3)
    repeated = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    want = torch.nn.functional.scaled_dot_product_attention(query, *repeated, attn_mask=mask, scale=0.3)
    torch.testing.assert_close(got, want.transpose(1, 2), atol=1e-5, rtol=0)
