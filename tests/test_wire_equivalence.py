"""The transport changes nothing: greedy output over gRPC + mutual TLS equals the in-process output
token for token, for a same-vocabulary and a cross-vocabulary pair, and the bytes counted match."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier, Verifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, make_pki, remote, serve

FIXTURES = Path(__file__).parent / "fixtures" / "users.jsonl"
PROMPT = task_prompt("refs: avoid rewriting packed-refs")
CROSS_PROMPT = "Write the body of a git commit message for this subject line.\n\nSubject: refs: speed up lookups"


def _run(specialist: Specialist, prompt: str, verifier: Verifier, params: SessionParams) -> Generation:
    return generate(specialist, prompt, params, DecodeOptions(max_new_tokens=24), verifier, fallback=False)


def _assert_same(local: Generation, net: Generation) -> None:
    assert net.stats.fallback is None
    assert net.token_ids == local.token_ids
    assert net.text == local.text
    for key in ("rounds", "drafted", "accepted", "recoveries", "bonus_tokens", "uplink_bytes", "downlink_bytes"):
        assert getattr(net.stats, key) == getattr(local.stats, key), key


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("equivalence"))


@pytest.fixture(scope="module")
def same_vocab(char_tok):
    profile = Profile.from_obj(json.loads(FIXTURES.read_text(encoding="utf-8").splitlines()[0]), source="fixture")
    s_lm, g_lm = tiny_lm(char_tok, seed=11, name="specialist"), tiny_lm(char_tok, seed=22, name="generalist", layers=3)
    return Specialist(s_lm, profile, context_chars=300), g_lm


@pytest.fixture(scope="module")
def cross_vocab(smol_tok, bpe_tok):
    return Specialist(tiny_lm(smol_tok, seed=5, name="specialist")), tiny_lm(bpe_tok, seed=6, name="generalist")


SAME_VOCAB_PARAMS = [
    SessionParams(gamma=0.05, draft_len=3),
    SessionParams(gamma=0.05, draft_len=2, bonus=False),
    SessionParams(gamma=math.inf, top_k=64, alpha=1.78, draft_len=2),
    SessionParams(gamma=0.5, top_k=5, policy=CandidatePolicy.LITERAL),
    SessionParams(method=Method.SD, draft_len=3),
    SessionParams(method=Method.FUSION, draft_len=0, top_k=20),
    SessionParams(method=Method.LLM, draft_len=0, alpha=0.0),
]


@pytest.mark.parametrize("params", SAME_VOCAB_PARAMS, ids=lambda p: f"{p.method.value}-g{p.gamma}-k{p.draft_len}")
def test_same_vocabulary_greedy_output_is_identical_over_grpc_tls(same_vocab, pki, params) -> None:
    # Prepare
    specialist, g_lm = same_vocab
    local_verifier = InProcessVerifier(
        CloudVerifier(g_lm, specialist.lm, seed=0).open, vocab_size=specialist.lm.vocab_size
    )
    tap = RecordingTap()
    # Execute
    local = _run(specialist, PROMPT, local_verifier, params)
    with (
        serve(CloudVerifier(g_lm, specialist.lm, seed=0), pki) as (_, port),
        remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=tap) as verifier,
    ):
        net = _run(specialist, PROMPT, verifier, params)
    # Assert: same tokens, same round structure, and the tap saw every byte that was counted.
    _assert_same(local, net)
    assert len(tap.uplinks) == net.stats.rounds + 2  # Open, the rounds, Close
    assert sum(map(len, tap.uplinks)) == net.stats.uplink_bytes


CROSS_VOCAB_PARAMS = [
    SessionParams(gamma=0.5),
    SessionParams(gamma=1e-6, draft_len=3, bonus=False),
    SessionParams(gamma=math.inf, top_k=8),
    SessionParams(method=Method.SD, draft_len=2),
]


@pytest.mark.parametrize("params", CROSS_VOCAB_PARAMS, ids=lambda p: f"{p.method.value}-g{p.gamma}-k{p.draft_len}")
def test_cross_vocabulary_greedy_output_is_identical_over_grpc_tls(cross_vocab, pki, params) -> None:
    specialist, g_lm = cross_vocab
    cloud = CloudVerifier(g_lm, specialist.lm, seed=0)
    assert cloud.cross_vocab
    local = _run(specialist, CROSS_PROMPT, InProcessVerifier(cloud.open, vocab_size=specialist.lm.vocab_size), params)
    with (
        serve(CloudVerifier(g_lm, specialist.lm, seed=0), pki) as (_, port),
        remote(port, pki, vocab_size=specialist.lm.vocab_size) as verifier,
    ):
        net = _run(specialist, CROSS_PROMPT, verifier, params)
    _assert_same(local, net)
    assert net.stats.new_tokens > 0
