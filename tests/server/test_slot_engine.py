"""The slot pool as the verifier's KV engine (`server serve --kv slots`): every session's rounds,
verdicts and steering are those of the default engine (a DynamicCache per session), alone and with
concurrent sessions merged into shared pool forwards; slots come back when sessions close; and
what the pool cannot serve is refused in one sentence."""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence

import grpc
import pytest
import torch

from specsteer.core import wire
from specsteer.core.cli import reported
from specsteer.core.errors import ConfigError, ProtocolError
from specsteer.core.kv import TokenSequence
from specsteer.core.models import CausalLM
from specsteer.core.session_types import Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.batching import ForwardBatcher
from specsteer.server.cli import _overrides, build_parser
from specsteer.server.config import ServerConfig, load_config
from specsteer.server.errors import NoSessionSlot, SessionOverCapacity, SessionTooLong, SlotPoolTooLarge
from specsteer.server.grpc_server import build_cloud
from specsteer.server.metrics import Metrics
from specsteer.server.session import CloudVerifier
from specsteer.server.slot_pool import SlotPool
from specsteer.server.slot_sequence import SlotPools, SlotSequence, slot_forward
from tests.server.test_batching import (
    PROMPTS,
    assert_same_rounds,
    in_process_texts,
    live_texts,
    merged_forwards,
    run_concurrently,
    run_one,
)
from tests.server.test_service import raw_stream
from tests.tinymodels import save_tiny, tiny_gemma, tiny_lm
from tests.verifier_harness import identity, make_pki, serve


@pytest.fixture(scope="module")
def pair(char_tok) -> tuple[CausalLM, CausalLM]:
    s_lm = tiny_lm(char_tok, seed=1, name="s", kv_heads=2)
    return s_lm, tiny_lm(char_tok, seed=2, name="g", layers=3, kv_heads=2)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_pki(tmp_path_factory.mktemp("slots"))


def slot_cloud(pair: tuple[CausalLM, CausalLM], slots: int = 8, max_len: int = 512) -> CloudVerifier:
    s_lm, g_lm = pair
    return CloudVerifier(g_lm, s_lm, seed=0, kv_slots=SlotPools(slots, max_len))


@pytest.mark.parametrize(
    "params",
    [SessionParams(draft_len=4), SessionParams(method=Method.SD, draft_len=3), SessionParams(gamma=0.05, draft_len=5)],
    ids=["specsteer", "sd", "low-gamma"],
)
def test_slot_engine_verifies_exactly_like_the_default_engine(pair, params) -> None:
    s_lm, g_lm = pair
    default, slots = CloudVerifier(g_lm, s_lm, seed=0), slot_cloud(pair)
    for prompt in PROMPTS[:2]:
        outs = []
        for cloud in (default, slots):
            verifier = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
            outs.append(generate(Specialist(s_lm), prompt, params, DecodeOptions(max_new_tokens=16), verifier))
        assert outs[1].token_ids == outs[0].token_ids and outs[1].stats.fallback is None
        assert outs[1].stats.accepted == outs[0].stats.accepted and outs[1].stats.rounds == outs[0].stats.rounds


def test_concurrent_sessions_share_pool_forwards_and_verify_as_alone(pair) -> None:
    s_lm, _ = pair
    sequential = [run_one(CloudVerifier(pair[1], s_lm, seed=0), s_lm, prompt, None) for prompt in PROMPTS]
    metrics = Metrics()
    batcher = ForwardBatcher(metrics, max_batch=3, max_wait=0.25)
    try:
        batched = run_concurrently(slot_cloud(pair), s_lm, batcher)
    finally:
        batcher.close()
    for (out, log), (want_out, want_log) in zip(batched, sequential, strict=True):
        assert out.token_ids == want_out.token_ids and out.stats.fallback is None
        assert_same_rounds(log, want_log)
    assert merged_forwards(metrics) > 0  # pool forwards really carried several sessions
    assert metrics.value("specsteer_unmerged_forwards_total", {"reason": "cache"}) == 0


def test_closing_a_session_frees_its_slots_and_a_full_pool_is_one_sentence(pair) -> None:
    cloud = slot_cloud(pair, slots=2)
    prompt = pair[0].tokenizer("hello", add_special_tokens=False)["input_ids"]
    first, second = cloud.open(prompt, SessionParams()), cloud.open(prompt, SessionParams())
    assert {first.s0.slot, second.s0.slot} == {0, 1}
    with pytest.raises(NoSessionSlot, match="no free KV slot: all 2 KV slots are taken"):
        cloud.open(prompt, SessionParams())
    first.close()  # its slots free, and the second session's move down into them (the pool stays packed)
    third = cloud.open(prompt, SessionParams())
    assert first.s0.slot == -1 and second.s0.slot == 0
    assert isinstance(third.s0, SlotSequence) and third.s0.slot == 1
    del second
    gc.collect()  # a session dropped without close gives its slots back too
    cloud.open(prompt, SessionParams())


def test_a_session_longer_than_its_slot_is_refused(pair) -> None:
    cloud = slot_cloud(pair, max_len=24)
    s_lm = pair[0]
    with pytest.raises(SessionOverCapacity, match="longer than this verifier's 24-token KV slots"):
        cloud.open(
            s_lm.tokenizer("a prompt that is far too long for it", add_special_tokens=False)["input_ids"],
            SessionParams(),
        )


def test_an_open_the_pool_refuses_holds_no_slot_even_before_the_collector_runs(pair) -> None:
    """The half-made session lived on in the exception's traceback (in the server, a cycle through
    the job's future), holding both its slots until the collector ran: a device sending over-long
    prompts emptied the pool."""
    cloud = slot_cloud(pair, slots=2, max_len=24)
    long_prompt = pair[0].tokenizer("a prompt that is far too long for it", add_special_tokens=False)["input_ids"]
    kept = []  # the exceptions, each with its traceback, as the server's futures hold them
    gc.disable()
    try:
        for _ in range(3):
            with pytest.raises(ProtocolError, match="24-token KV slots") as refused:
                cloud.open(long_prompt, SessionParams())
            kept.append(refused.value)
        assert cloud.kv_slots is not None
        assert [sorted(pool.free_slots()) for pool in cloud.kv_slots.pools()] == [[0, 1], [0, 1]]
    finally:
        gc.enable()


def test_a_session_closed_mid_round_keeps_its_slots_until_the_round_is_done(pair) -> None:
    """A stream that vanished closes its session while the round's job still runs on a worker: the
    slots then went back under its forward, which wrote into another session's row (a lease at -1
    indexes the last slot) and made merged forwards fail for every session in them."""
    s_lm, _ = pair
    cloud = slot_cloud(pair, slots=2)
    prompt = s_lm.tokenizer("hello", add_special_tokens=False)["input_ids"]
    gate, entered, go_on = threading.Event(), threading.Event(), threading.Event()

    def slow_forward(seq: SlotSequence, new: Sequence[int]) -> torch.Tensor:
        if gate.is_set():  # the round's forwards, not the prefill's
            entered.set()
            assert go_on.wait(10)
        return slot_forward(seq, new)

    session = cloud.open(prompt, SessionParams(draft_len=2), runner=slow_forward)
    other = cloud.open(prompt, SessionParams(draft_len=2))
    gate.set()
    lengths = [list(pool.lengths) for pool in cloud.kv_slots.pools()]  # type: ignore[union-attr]
    worker = threading.Thread(target=lambda: session.round([], [4, 5]))
    worker.start()
    assert entered.wait(10)
    session.close()  # from the event loop's side, while the round's forward waits
    assert session.s0.slot == 0 and session.g.seq.slot == 0  # still held
    go_on.set()
    worker.join(10)
    assert session.s0.slot == -1 and session.g.seq.slot == -1  # handed back once the round was done
    assert other.s0.slot == 0  # and the other session moved down, its length intact
    for pool, before in zip(cloud.kv_slots.pools(), lengths, strict=True):  # type: ignore[union-attr]
        assert pool.lengths[0] == before[1]
    with pytest.raises(ProtocolError, match="closed"):
        session.round([], [4])


def test_the_pool_refuses_a_released_lease_rather_than_write_another_sessions_row(pair) -> None:
    pool = SlotPool(pair[0].model, 3, 64)
    held, released = pool.lease(), pool.lease()
    pool.run({held: [1, 2, 3]})
    pool.release(released)
    with pytest.raises(ProtocolError, match="KV slot was released"):
        pool.run({held: [4], released: [5]})
    with pytest.raises(ProtocolError, match="KV slot was released"):
        pool.set_length(released, 0)
    assert pool.lengths == [3, 0, 0]


def test_a_session_past_the_protocols_length_is_refused(pair, monkeypatch) -> None:
    """The verifier bounded no session: a device could grow its KV caches round after round."""
    s_lm, _ = pair
    prompt = s_lm.tokenizer("hello", add_special_tokens=False)["input_ids"]
    monkeypatch.setattr("specsteer.server.session.MAX_NEW_TOKENS", 4)
    monkeypatch.setattr("specsteer.server.session.MAX_CANDIDATE_TOKENS", 0)
    for cloud in (slot_cloud(pair), CloudVerifier(pair[1], s_lm, seed=0)):
        # Placeholders count apart: 4 of text and 4 of placeholder are within a bound of 4 each.
        session = cloud.open(prompt, SessionParams(draft_len=4))
        verdict = session.round([], [4, 5, 6, 7], [9, 9, 9, 9])
        commit = list(verdict.steering.candidates[0]) if verdict.steering else []
        with pytest.raises(SessionTooLong, match=r"past the protocol's 4 new tokens \(\d+ of its text"):
            session.round(commit, [7, 8, 9, 10])


@pytest.mark.parametrize("at", ["open", "round"])
def test_a_session_past_this_verifiers_slots_ends_resource_exhausted_on_a_live_server(pair, pki, at) -> None:
    """A session within the protocol's bounds that the verifier's slots cannot hold is the
    verifier's limit, not the device's error: RESOURCE_EXHAUSTED, on which the device finishes on
    its own (it was INVALID_ARGUMENT at Open and OUT_OF_RANGE mid-session: a hard error there)."""
    s_lm, _ = pair
    prompt = s_lm.tokenizer("hello", add_special_tokens=False)["input_ids"]
    held = len(slot_cloud(pair).open(prompt, SessionParams()).s0)  # the rendered prompt's tokens
    frames = [wire.encode_open(prompt, SessionParams(draft_len=4)), wire.encode_round(1, [], [4, 5, 6, 7])]
    max_len = held - 1 if at == "open" else held + 2
    with (
        serve(slot_cloud(pair, slots=2, max_len=max_len), pki) as (_, port),
        grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials()) as channel,
    ):
        _, code, details = raw_stream(channel, frames)
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
    assert f"longer than this verifier's {max_len}-token KV slots" in details


def test_pairs_the_pool_cannot_serve_are_refused(char_tok, bpe_tok, pair) -> None:
    s_lm = pair[0]
    gemma = CausalLM.from_parts("g", tiny_gemma(char_tok, seed=7, window=40), char_tok)
    with pytest.raises(ValueError, match="sliding-window"):
        CloudVerifier(gemma, s_lm, kv_slots=SlotPools(2, 64))
    with pytest.raises(ValueError, match="shares the Specialist's vocabulary"):
        CloudVerifier(tiny_lm(bpe_tok, seed=6, name="g"), s_lm, kv_slots=SlotPools(2, 64))


def test_a_pool_made_after_the_warm_up_is_warmed_as_it_is_made(pair, smol_tok, monkeypatch) -> None:
    """The server warms its two models' pools before it serves; a pool made later (a global adapter
    version's copy, at the first Open declaring it) must not capture its graphs, or compile, in
    its first sessions' rounds: it is warmed when it is made, once."""
    warmed: list[object] = []
    monkeypatch.setattr(SlotPool, "warm_up", lambda pool, shapes=None: warmed.append(pool.model) or 0)
    s_lm, g_lm = pair
    pools = SlotPools(2, 64)
    early = tiny_lm(smol_tok, seed=11, name="made before the warm-up").model
    pools.pool(early)
    assert warmed == []  # the server's warm-up does it
    pools.warm_up([g_lm.model, s_lm.model])
    assert warmed == [g_lm.model, s_lm.model]
    version = tiny_lm(smol_tok, seed=12, name="an adapter version's copy").model
    pools.pool(version)
    pools.pool(version)
    assert warmed == [g_lm.model, s_lm.model, version]


def test_kv_settings_from_toml_and_command_line(tmp_path) -> None:
    path = tmp_path / "server.toml"
    path.write_text('[models]\nkv = "slots"\nkv_max_len = 1024\n')
    config = load_config(path)
    assert (config.kv, config.slot_count, config.kv_max_len) == ("slots", 64, 1024)
    args = build_parser().parse_args(["serve", "--kv", "slots", "--kv-slots", "16", "--kv-max-len", "4096"])
    config = load_config(None, _overrides(args))
    assert (config.kv, config.slot_count, config.kv_max_len) == ("slots", 16, 4096)
    assert (config.kv_forward, config.kv_compile) == ("fused", False)
    args = build_parser().parse_args(["serve", "--kv", "slots", "--kv-forward", "transformers", "--kv-compile"])
    config = load_config(None, _overrides(args))
    assert (config.kv_forward, config.kv_compile) == ("transformers", True)
    path.write_text('[models]\nkv = "paged"\n')
    with pytest.raises(ConfigError, match="kv must be dynamic or slots; got 'paged'"):
        load_config(path)
    path.write_text('[models]\nkv = "slots"\nkv_forward = "triton"\n')
    with pytest.raises(ConfigError, match="kv_forward must be fused or transformers; got 'triton'"):
        load_config(path)
    path.write_text('[models]\nkv = "slots"\nkv_compile = "yes"\n')
    with pytest.raises(ConfigError, match="kv_compile must be true or false; got 'yes'"):
        load_config(path)


def test_a_server_whose_slot_pools_would_not_fit_the_host_refuses_to_start(tmp_path, char_tok, capsys) -> None:
    """`server serve --kv slots` with more slots than the machine's memory holds: one sentence with
    the figures and exit 1, before a single KV buffer is allocated (not a traceback, and not a
    server that the kernel kills once sessions write their pages)."""
    s = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g = save_tiny(tmp_path, char_tok, seed=2, name="g")
    config = ServerConfig(generalist=str(g), specialist=str(s), kv="slots", kv_slots=2**20, kv_max_len=2**16)
    with pytest.raises(SlotPoolTooLarge, match=r"the KV slot pool of 1048576 slots x 65536 positions needs"):
        build_cloud(config)
    capsys.readouterr()
    assert reported("server", lambda: build_cloud(config) and 0) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the weights' loading bar
    assert last.startswith("server: error: the KV slot pool of 1048576 slots")


def test_live_verifier_on_the_slot_pool_serves_concurrent_devices_as_in_process(pair, pki) -> None:
    """A real server over mutual TLS with the slot engine and batching on: four devices at once get
    the default engine's texts, and their sessions' slots are free again once they are done."""
    s_lm, g_lm = pair
    cloud = slot_cloud(pair, slots=4)
    got, metrics = live_texts(cloud, s_lm, pki, batching=True, max_batch=4, batch_wait_ms=50)
    assert got == in_process_texts(g_lm, s_lm)
    assert merged_forwards(metrics) > 0
    assert cloud.kv_slots is not None
    for pool in cloud.kv_slots.pools():
        assert pool.fused  # the pool's own forward (server.fused_decoder), the server's default
        assert sorted(pool.free_slots()) == [0, 1, 2, 3]


def test_a_slot_prefill_hands_back_its_prompts_last_row_only(pair) -> None:
    """The slot pool's side of the prefill finding (tests/core/test_kv.py): a prompt's forward
    clones and log-softmaxes its last row only, not one a prompt token; a block keeps every row."""
    # Prepare
    s_lm, _ = pair
    prompt = list(range(5, 25))
    returned: list[int] = []

    def counting(seq: SlotSequence, new: list[int]):  # type: ignore[no-untyped-def]
        logits = slot_forward(seq, new)
        returned.append(logits.shape[0])
        return logits

    seq = SlotPools(2, 64).sequence(s_lm.model, prompt, counting)
    reference = TokenSequence(s_lm.model, prompt)
    # Execute
    first = seq.next_logprobs()
    for s in (seq, reference):
        s.push([30, 31, 32])
    # Assert
    torch.testing.assert_close(first, reference.logprobs_at(len(prompt)), atol=1e-5, rtol=0)
    torch.testing.assert_close(seq.next_logprobs(), reference.next_logprobs(), atol=1e-5, rtol=0)
    assert returned == [1, 3]
