"""Each cloud session draws from a generator of its own: no device can count another's draws."""

from __future__ import annotations

import pytest

from specsteer.core.session_types import Method, SessionParams
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm

PROMPT = [40, 41, 42, 43]
SAMPLING = SessionParams(method=Method.LLM, sampling=True, draft_len=0, top_k=1, alpha=0.0)


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g", initializer_range=0.02)


def _draws(session, rounds: int = 6) -> list[int]:
    # `llm` sampling: each round's one candidate is a draw from P_G; the next round commits it.
    out: list[int] = []
    for _ in range(rounds):
        commit = out[-1:] if out else []
        verdict = session.round(commit, [])
        assert verdict.steering is not None
        out += list(verdict.steering.candidates[0])
    return out


def test_a_sessions_draws_do_not_depend_on_what_other_sessions_drew(models) -> None:
    # With one generator for the verifier, a device sampling with a known seed read off its own
    # tokens how many draws other devices' sessions made between its rounds.
    s_lm, g_lm = models
    alone = _draws(CloudVerifier(g_lm, s_lm, seed=0).open(PROMPT, SAMPLING))
    busy = CloudVerifier(g_lm, s_lm, seed=0)
    mine, other = busy.open(PROMPT, SAMPLING), busy.open(PROMPT, SAMPLING)
    drawn: dict[int, list[int]] = {id(mine): [], id(other): []}
    for _ in range(6):  # the other session samples between each of this one's rounds
        for session in (mine, other, other):
            got = drawn[id(session)]
            got += list(session.round(got[-1:], []).steering.candidates[0])
    assert drawn[id(mine)] == alone


def test_sessions_draw_alike_from_run_to_run_with_a_seed_and_apart_without(models) -> None:
    s_lm, g_lm = models
    seeded = CloudVerifier(g_lm, s_lm, seed=7)
    first, second = (_draws(seeded.open(PROMPT, SAMPLING)) for _ in range(2))
    assert first == _draws(CloudVerifier(g_lm, s_lm, seed=7).open(PROMPT, SAMPLING))  # every run alike
    assert first != second  # two sessions of one verifier are two streams
    unseeded = [_draws(CloudVerifier(g_lm, s_lm).open(PROMPT, SAMPLING)) for _ in range(2)]
    assert unseeded[0] != unseeded[1]
