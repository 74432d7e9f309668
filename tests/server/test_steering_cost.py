"""The cloud's steering step does no more P_S^0 scoring than the candidates it sends need."""

from __future__ import annotations

import pytest

from core.kv import TokenSequence
from core.session_types import CandidatePolicy, SessionParams
from sdk.device import DecodeOptions, Specialist, generate
from sdk.transport import InProcessVerifier
from server.session import CloudVerifier
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
