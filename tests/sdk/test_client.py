"""The embeddable API: one client, many generations (also concurrent), text streamed as it commits."""

from __future__ import annotations

import threading

import pytest

from specsteer.core.errors import ConfigError, SpecSteerError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.client import ClientConfig, SpecSteerClient
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.sdk.uplink_guard import guard_setting
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, make_pki, serve

PROMPTS = ["Hello there", "Write a haiku about rain", "Once upon a time"]


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("client"))


@pytest.fixture(scope="module")
def live(models, pki):
    with serve(CloudVerifier(models[1], models[0], seed=0, max_top_k=64), pki) as s:
        yield s


@pytest.fixture
def config(pki, live) -> ClientConfig:
    return ClientConfig(
        server=f"127.0.0.1:{live[1]}", pins=pki.pins, cert=pki.device_cert("alice"), key=pki.device_key("alice")
    )


def expected(models, prompt: str, **kw) -> list[int]:
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    # The same egress guard as the client's default: its holds shape the rounds, and with the
    # steered bonus token the rounds shape the text.
    guard = guard_setting(None, s_lm.tokenizer, "placeholder")
    options = DecodeOptions(max_new_tokens=16)
    return generate(Specialist(s_lm), prompt, SessionParams(**kw), options, verifier, guard=guard).token_ids


def test_one_client_many_generations(models, config, live) -> None:
    # Prepare
    tap = RecordingTap()
    with SpecSteerClient.connect(models[0], config, tap=tap, options=DecodeOptions(max_new_tokens=16)) as client:
        # Execute
        results = [client.generate(p, gamma=0.05, draft_len=3) for p in PROMPTS]
    # Assert: each equals its in-process run; one device-local egress session per generation.
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert result.token_ids == expected(models, prompt, gamma=0.05, draft_len=3)
        assert result.stats.fallback is None
    assert tap.sessions == len(PROMPTS)


def test_stream_yields_text_as_tokens_commit(models, config) -> None:
    with SpecSteerClient.connect(models[0], config, options=DecodeOptions(max_new_tokens=16)) as client:
        stream = client.stream(PROMPTS[1], gamma=0.05)
        pieces = list(stream)
        result = stream.result
    assert len(pieces) > 1  # incremental, not one blob at the end
    assert "".join(pieces) == result.text
    assert result.token_ids == expected(models, PROMPTS[1], gamma=0.05)


def test_closing_a_stream_stops_the_generation(models, config, live) -> None:
    server, _ = live
    rounds_before = server.metrics.value("specsteer_rounds_total")
    with SpecSteerClient.connect(models[0], config, options=DecodeOptions(max_new_tokens=200)) as client:
        stream = client.stream(PROMPTS[2], gamma=float("inf"))  # one token per round: many rounds
        first = next(iter(stream))
        stream.close()
        with pytest.raises(SpecSteerError, match="did not finish"):
            _ = stream.result
    assert first
    assert server.metrics.value("specsteer_rounds_total") - rounds_before < 200


def test_concurrent_generations_share_one_client(models, config) -> None:
    results: dict[str, list[int]] = {}
    with SpecSteerClient.connect(models[0], config, options=DecodeOptions(max_new_tokens=16)) as client:

        def work(prompt: str) -> None:
            results[prompt] = client.generate(prompt, gamma=0.05, draft_len=2).token_ids

        threads = [threading.Thread(target=work, args=(p,)) for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert {p: results[p] for p in PROMPTS} == {p: expected(models, p, gamma=0.05, draft_len=2) for p in PROMPTS}


def test_unknown_generation_setting_is_refused(models, config) -> None:
    with SpecSteerClient.connect(models[0], config) as client, pytest.raises(ConfigError, match="'gama'"):
        client.generate("Hi", gama=0.1)
