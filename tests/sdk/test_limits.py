"""The protocol's limits (`core.limits`) hold on the device before it computes or sends anything.

A 100,000-character prompt used to run 30-45 s of the device's prefill before the verifier refused
it, and against a remote verifier it ended as `fallback: verifier-busy` with 100,037 uplink bytes
counted that gRPC never sent. Here every out-of-bounds request is one `ConfigError` sentence, with
no forward pass (a hook counts them), no session opened and no byte on the uplink; and a frame
queued behind a broken stream is not counted as sent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from specsteer.core import wire
from specsteer.core.errors import ConfigError, ProtocolError
from specsteer.core.limits import (
    MAX_DOWNLINK_BYTES,
    MAX_NEW_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_UPLINK_BYTES,
    WIRE_MAX_TOP_K,
)
from specsteer.core.models import CausalLM
from specsteer.core.session_types import (
    ALPHA_MAX,
    GAMMA_MAX,
    MAX_ADAPTER_VERSION,
    MAX_CANDIDATE_TOKENS,
    MAX_DRAFT_LEN,
    Method,
    SessionParams,
    SteeringVector,
    Verdict,
)
from specsteer.sdk.cli import main
from specsteer.sdk.client import ClientConfig, SpecSteerClient
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier, VerifierLost
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, make_pki, remote, serve

LONG_PROMPT = "a" * 100_000  # one token per character with the character tokenizer
PARAMS = SessionParams(gamma=0.5, draft_len=3, top_k=5)


@pytest.fixture(scope="module")
def models(char_tok) -> tuple[CausalLM, CausalLM]:
    return tiny_lm(char_tok, seed=5, name="s"), tiny_lm(char_tok, seed=6, name="g")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("limits"))


@contextmanager
def counting_forwards(*lms: CausalLM) -> Iterator[list[int]]:
    """A one-element list holding how many forward passes `lms` ran inside the block."""
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    handles = [lm.model.register_forward_pre_hook(count) for lm in lms]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


# -- the limits themselves ---------------------------------------------------------------------


def test_the_largest_legal_frames_fit_the_message_caps() -> None:
    # The caps are sized from the token limits: a frame the protocol allows is never refused for size.
    widest = 2**32 - 2  # the largest uint32 that is no pad slot: 5 varint bytes per ID
    params = SessionParams(
        gamma=GAMMA_MAX, alpha=ALPHA_MAX, top_k=WIRE_MAX_TOP_K, draft_len=MAX_DRAFT_LEN,
        adapter_version=MAX_ADAPTER_VERSION, padded_frames=True, sampling=True,
    )  # fmt: skip
    assert len(wire.encode_open([widest] * MAX_PROMPT_TOKENS, params)) <= MAX_UPLINK_BYTES
    candidates = tuple((widest,) * MAX_CANDIDATE_TOKENS for _ in range(WIRE_MAX_TOP_K))
    steering = SteeringVector(candidates, (-1e30,) * WIRE_MAX_TOP_K)
    assert len(wire.encode_downlink(2**32 - 1, Verdict(MAX_DRAFT_LEN, steering))) <= MAX_DOWNLINK_BYTES


def test_the_verifier_refuses_one_token_over_the_limit_with_the_devices_sentence(models) -> None:
    s_lm, g_lm = models
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    cloud.open([5] * MAX_PROMPT_TOKENS, PARAMS).close()  # at the limit: taken
    with pytest.raises(
        ProtocolError, match=f"the prompt has 4,097 tokens; the verifier takes at most {MAX_PROMPT_TOKENS}$"
    ):
        cloud.open([5] * (MAX_PROMPT_TOKENS + 1), PARAMS)


# -- the device refuses before any forward pass --------------------------------------------------


def test_an_overlong_prompt_is_refused_in_process_before_any_forward(models) -> None:
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    with counting_forwards(s_lm, g_lm) as forwards, pytest.raises(ConfigError) as refused:
        generate(Specialist(s_lm), LONG_PROMPT, PARAMS, DecodeOptions(max_new_tokens=8), verifier)
    assert str(refused.value) == f"the prompt has 100,000 tokens; the verifier takes at most {MAX_PROMPT_TOKENS}"
    assert forwards[0] == 0


@pytest.mark.parametrize("method", [Method.SLM, Method.SLM_RAG])
def test_an_overlong_prompt_is_refused_by_the_device_only_methods_too(models, method) -> None:
    # The same prompt runs the same way whichever method it is sent with: no minutes of prefill first.
    s_lm, _ = models
    with counting_forwards(s_lm) as forwards, pytest.raises(ConfigError, match="the prompt has 100,000 tokens"):
        generate(Specialist(s_lm), LONG_PROMPT, SessionParams(method=method), DecodeOptions(max_new_tokens=8))
    assert forwards[0] == 0


def test_an_overlong_prompt_is_refused_before_a_remote_session_opens(models, pki) -> None:
    s_lm, g_lm = models
    tap = RecordingTap()
    with serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (_, port):
        config = ClientConfig(
            server=f"127.0.0.1:{port}", pins=pki.pins, cert=pki.device_cert("alice"), key=pki.device_key("alice")
        )
        with SpecSteerClient.connect(s_lm, config, tap=tap) as client:
            with counting_forwards(s_lm, g_lm) as forwards, pytest.raises(ConfigError) as refused:
                client.generate(LONG_PROMPT, max_new_tokens=8)
            assert forwards[0] == 0 and tap.sessions == 0 and tap.uplinks == []
            # Nothing was half-sent: the same client generates next.
            assert client.generate("Hello there", max_new_tokens=4).stats.fallback is None
    assert str(refused.value) == f"the prompt has 100,000 tokens; the verifier takes at most {MAX_PROMPT_TOKENS}"
    assert tap.sessions == 1


@pytest.mark.parametrize(
    ("where", "overrides", "message"),
    [
        ("remote", {"top_k": WIRE_MAX_TOP_K + 1}, f"top-k must be at most {WIRE_MAX_TOP_K} with a remote verifier"),
        ("in-process", {"top_k": 100_000}, "top-k must be at most the vocabulary of"),
    ],
)
def test_a_top_k_above_the_cap_is_refused_before_any_forward(models, pki, where, overrides, message) -> None:
    s_lm, g_lm = models
    params = SessionParams(**{"draft_len": 3, **overrides})
    tap = RecordingTap()
    with serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (_, port):
        if where == "remote":
            verifier = remote(port, pki, vocab_size=s_lm.vocab_size, tap=tap)
        else:
            verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
        with counting_forwards(s_lm, g_lm) as forwards, pytest.raises(ConfigError, match=message):
            generate(Specialist(s_lm), "Hello there", params, DecodeOptions(max_new_tokens=8), verifier)
    assert forwards[0] == 0 and tap.sessions == 0 and tap.uplinks == []


def test_the_whole_vocabulary_is_still_a_legal_top_k_in_process(models) -> None:
    # Full-vocabulary steering is how the oracles compare SpecSteer with token-level fusion.
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    params = SessionParams(draft_len=2, top_k=s_lm.vocab_size, gamma=math.inf)
    out = generate(Specialist(s_lm), "Hello there", params, DecodeOptions(max_new_tokens=3), verifier)
    assert out.stats.new_tokens == 3 and out.stats.recoveries > 0


@pytest.mark.parametrize("max_new_tokens", [0, MAX_NEW_TOKENS + 1, 1_000_000_000])
def test_max_new_tokens_out_of_bounds_is_refused_up_front(max_new_tokens: int) -> None:
    with pytest.raises(ConfigError, match=rf"max-new-tokens must be in \[1, {MAX_NEW_TOKENS}\]"):
        DecodeOptions(max_new_tokens=max_new_tokens)
    DecodeOptions(max_new_tokens=MAX_NEW_TOKENS)  # the ceiling itself is allowed


def test_absurd_max_new_tokens_fails_the_cli_before_a_model_loads(capsys) -> None:
    # No --specialist: had the check come after loading, the embedded default would be loading now.
    code = main(["generate", "--prompt", "Hi", "--max-new-tokens", "1000000000"])
    err = capsys.readouterr().err
    assert code == 1 and "loading" not in err
    assert err.strip() == f"sdk: error: max-new-tokens must be in [1, {MAX_NEW_TOKENS}]; got 1000000000"


# -- uplink bytes count what was sent ------------------------------------------------------------


def test_a_whole_remote_generation_counts_exactly_the_frames_sent(models, pki) -> None:
    s_lm, g_lm = models
    tap = RecordingTap()
    with (
        serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (_, port),
        remote(port, pki, vocab_size=s_lm.vocab_size, tap=tap) as verifier,
    ):
        out = generate(Specialist(s_lm), "Hello there", PARAMS, DecodeOptions(max_new_tokens=8), verifier)
    assert out.stats.fallback is None and len(tap.uplinks) == out.stats.rounds + 2  # Open, rounds, Close
    assert out.stats.uplink_bytes == sum(len(u) for u in tap.uplinks)


def test_a_frame_behind_a_broken_stream_is_not_counted_as_sent(models, pki) -> None:
    s_lm, g_lm = models
    tap = RecordingTap()
    with serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (server, port):
        verifier = remote(port, pki, vocab_size=s_lm.vocab_size, tap=tap)
        session = verifier.open(s_lm.tokenizer.encode("Hello", add_special_tokens=False), PARAMS)
        session.round([], [40, 41, 42])
        sent_before = session.uplink_bytes
        server.stop(grace=0)
        # Wait until the device has seen the stream end, so the next frame is queued behind it.
        deadline = time.monotonic() + 10
        while session._responses.empty():
            assert time.monotonic() < deadline, "the broken stream was never noticed"
            time.sleep(0.01)
        # A verifier shutting down mid-session is lost, not a refusal: the device may finish locally.
        with pytest.raises(VerifierLost):
            session.round([], [43, 44])
        session.close()
        verifier.close()
    assert len(tap.uplinks) == 3  # Open, round 1, and round 2, which the tap saw but gRPC never sent
    assert sent_before == len(tap.uplinks[0]) + len(tap.uplinks[1])
    assert session.uplink_bytes == sent_before


def test_a_frame_over_the_uplink_cap_is_refused_before_the_tap(models, pki) -> None:
    s_lm, g_lm = models
    tap = RecordingTap()
    with (
        serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (_, port),
        remote(port, pki, vocab_size=s_lm.vocab_size, tap=tap) as verifier,
    ):
        session = verifier.open([40, 41], PARAMS)
        with pytest.raises(ProtocolError, match="over the protocol's 65,536; nothing was sent"):
            session._send(b"\x00" * (MAX_UPLINK_BYTES + 1))
        session.close()
    assert [len(u) for u in tap.uplinks] == [len(wire.encode_open([40, 41], PARAMS))]
