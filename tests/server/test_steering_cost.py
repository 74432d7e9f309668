"""The cloud's steering step does no more P_S^0 scoring than the candidates it sends need."""

from __future__ import annotations

import pytest

from specsteer.core.kv import TokenSequence
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm

PROMPT = "Write the body of a git commit message for this subject line.\n\nSubject: refs: speed up lookups"


@pytest.fixture(scope="module")
def pair(smol_tok, bpe_tok):
    return tiny_lm(smol_tok, seed=5, name="specialist"), tiny_lm(bpe_tok, seed=6, name="generalist")


@pytest.mark.parametrize(("policy", "most"), [(CandidatePolicy.GUARDRAIL, 3), (CandidatePolicy.LITERAL, None)])
def test_guardrail_scores_only_the_k_candidates_it_sends(pair, monkeypatch, policy, most) -> None:
    # Prepare: record how many continuations every P_S^0 / P_S^c scoring call gets.
    s_lm, g_lm = pair
    sizes: list[int] = []
    real = TokenSequence.score_continuations

    def recording(self: TokenSequence, continuations):  # type: ignore[no-untyped-def]
        sizes.append(len(continuations))
        return real(self, continuations)

    monkeypatch.setattr(TokenSequence, "score_continuations", recording)
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
    params = SessionParams(gamma=0.5, top_k=3, policy=policy)
    # Execute
    out = generate(Specialist(s_lm), PROMPT, params, DecodeOptions(max_new_tokens=12), verifier)
    # Assert: the guardrail sends the top 3 by P_G, so nothing scores more than 3; literal ranks the pool.
    assert out.stats.rounds > 0 and sizes
    if most is not None:
        assert max(sizes) <= most
    else:
        assert max(sizes) > 3


@pytest.mark.parametrize(
    ("params", "s0_forwards_a_round"),
    [
        (SessionParams(gamma=0.5), 1),  # the draft's block, once: before P_G's read, then read
        (SessionParams(method=Method.SD), 0),  # sd verifies and steers by P_G alone
        (SessionParams(method=Method.LLM, draft_len=0, alpha=0.0), 0),  # llm without alpha: P_G alone
    ],
    ids=["specsteer", "sd", "llm"],
)
def test_a_round_runs_p_s0_only_where_the_method_reads_it(smol_tok, params, s0_forwards_a_round) -> None:
    s_lm, g_lm = tiny_lm(smol_tok, seed=5, name="specialist"), tiny_lm(smol_tok, seed=6, name="generalist")
    prompt = s_lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    session = CloudVerifier(g_lm, s_lm, seed=0).open(prompt, params)
    before = session.s0.forward_passes
    commit: list[int] = []
    for _ in range(3):
        draft = [s_lm.tokenizer.encode(" the", add_special_tokens=False)[0]] * params.draft_len
        verdict = session.round(commit, draft)
        assert verdict.steering is not None
        commit = list(verdict.steering.candidates[0])
    assert session.s0.forward_passes - before == 3 * s0_forwards_a_round
