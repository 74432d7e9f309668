"""Cross-vocabulary SpecSteer on two different tokenizers (SmolLM2's real one and a small BPE):
the committed text is the source of truth on both sides, and every rule still holds."""

from __future__ import annotations

import math

import pytest

from core.session_types import Method, SessionParams
from sdk.device import DecodeOptions, Specialist, generate
from sdk.transport import InProcessVerifier
from server.generalist import CrossVocabGeneralist
from server.session import CloudSession, CloudVerifier
from tests.tinymodels import tiny_lm

PROMPT = "Write the body of a git commit message for this subject line.\n\nSubject: refs: speed up lookups"


class CheckingVerifier(CloudVerifier):
    """Checks after every round that the Generalist's tokens spell exactly the committed text."""

    def open(self, prompt_ids, params) -> CloudSession:
        session = super().open(prompt_ids, params)
        inner = session.round

        def round_and_check(commit, draft, literal=()):
            verdict = inner(commit, draft, literal)
            g = session.g
            assert isinstance(g, CrossVocabGeneralist)
            generated = g.seq.ids[g._prompt_len :]
            assert g.codec.decode(generated) == g.committed_text()
            assert len(g._g_ends) == len(generated)
            self.rounds_checked += 1
            return verdict

        session.round = round_and_check  # type: ignore[method-assign]
        return session


@pytest.fixture(scope="module")
def pair(smol_tok, bpe_tok):
    return tiny_lm(smol_tok, seed=5, name="specialist"), tiny_lm(bpe_tok, seed=6, name="generalist")


def run(pair, **kw):
    s_lm, g_lm = pair
    cloud = CheckingVerifier(g_lm, s_lm, seed=0)
    cloud.rounds_checked = 0
    assert cloud.cross_vocab
    verifier = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
    out = generate(Specialist(s_lm), PROMPT, SessionParams(**kw), DecodeOptions(max_new_tokens=20), verifier)
    return out, cloud


@pytest.mark.parametrize(
    "kw",
    [
        {"gamma": 0.5},
        {"gamma": 1e-6, "draft_len": 3},
        {"gamma": 1e-6, "draft_len": 3, "bonus": False},
        {"gamma": math.inf},
        {"method": Method.SD, "draft_len": 2},
        {"method": Method.FUSION, "draft_len": 0},
        {"sampling": True, "gamma": 0.01},
    ],
)
def test_cross_vocabulary_generation_keeps_both_sides_on_one_text(pair, kw) -> None:
    out, cloud = run(pair, **kw)
    s_lm = pair[0]
    assert out.stats.new_tokens == len(out.token_ids) > 0
    assert cloud.rounds_checked == out.stats.rounds
    assert out.text == s_lm.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert 0 <= out.stats.extra["draft_boundaries_shared"] <= out.stats.drafted


def test_every_recovery_is_a_generalist_candidate_string(pair) -> None:
    # gamma = inf: each round commits one candidate, the Specialist spelling of a Generalist token.
    out, _ = run(pair, gamma=math.inf, top_k=5)
    assert out.stats.accepted == 0 and out.stats.recoveries == out.stats.rounds


def test_gamma_zero_accepts_every_segment_across_vocabularies(pair) -> None:
    # Only draft tokens after the last boundary both tokenizers share can be left unaccepted.
    out, _ = run(pair, gamma=0.0, draft_len=4)
    assert out.stats.accepted > 0
    assert out.stats.accepted >= out.stats.extra["draft_boundaries_shared"] - out.stats.rounds
