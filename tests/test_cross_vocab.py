"""Cross-vocabulary SpecSteer on two different tokenizers (SmolLM2's real one and a small BPE):
the committed text is the source of truth on both sides, and every rule still holds."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from specsteer.core.session_types import Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.generalist import CrossVocabGeneralist
from specsteer.server.session import CloudSession, CloudVerifier
from specsteer.server.vocab import TextCodec
from tests.tinymodels import EOS_ID, perturbed_copy, tiny_lm

PROMPT = "Write the body of a git commit message for this subject line.\n\nSubject: refs: speed up lookups"


class CheckingVerifier(CloudVerifier):
    """Checks after every round that the Generalist's tokens spell exactly the committed text."""

    def open(self, prompt_ids, params) -> CloudSession:
        session = super().open(prompt_ids, params)
        inner = session.round

        def round_and_check(commit, draft, literal=()):
            verdict = inner(commit, draft, literal)
            g = session.g
            if not isinstance(g, CrossVocabGeneralist):
                return verdict  # the shared-vocabulary path has nothing to check here
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


# -- Characters a byte-level tokenizer splits (review findings 5-7) ---------------------------------


@pytest.fixture(scope="module")
def bpe_generalist(bpe_tok):
    return tiny_lm(bpe_tok, seed=6, name="generalist")


def fresh(g_lm, s_tok) -> CrossVocabGeneralist:
    return CrossVocabGeneralist(g_lm, TextCodec(s_tok, frozenset({EOS_ID})), g_lm.tokenizer.encode("Hello"))


def test_a_split_character_leaves_the_rest_of_the_round_verifiable(bpe_tok, bpe_generalist) -> None:
    # "é" is two byte tokens in this BPE (trained on ASCII): each ends inside the character.
    encode = partial(bpe_tok.encode, add_special_tokens=False)
    assert len(encode("é")) == 2
    plain = fresh(bpe_generalist, bpe_tok).extend([], encode(" the world is"))
    assert len(plain) == 7
    # Both bytes: the first is not a boundary, the second closes one more unit.
    units = fresh(bpe_generalist, bpe_tok).extend([], encode(" the world isé"))
    assert [u.s_stop for u in units] == [u.s_stop for u in plain] + [9]
    # A draft that stops inside the character: its last token joins no unit, the rest all verify.
    units = fresh(bpe_generalist, bpe_tok).extend([], encode(" the world isé")[:-1])
    assert [u.s_stop for u in units] == [u.s_stop for u in plain]


def test_generalist_context_stays_aligned_through_split_characters(smol_tok, bpe_generalist) -> None:
    # Specialist: SmolLM2's tokenizer; Generalist: a BPE that splits every accented letter in two.
    g = fresh(bpe_generalist, smol_tok)
    encode = partial(smol_tok.encode, add_special_tokens=False)
    pending: list[int] = []
    for chunk in ("Hi", " René", " and", " m", "ore café", "é, ", "naïve", " end"):
        draft = encode(chunk)
        units = g.extend(pending, draft)
        n = units[-1].s_stop if units else 0
        g.accept(n)
        g.next_logprobs()  # the steering read after each round
        pending = draft[n:]  # committed next round, as a recovery would be
        generated = g.seq.ids[g._prompt_len :]
        assert g.codec.decode(generated) == g.committed_text(), chunk
        assert len(g._g_ends) == len(g._g_logps) == len(generated)
    g.extend(pending, [])
    assert g.committed_text() == "Hi René and more caféé, naïve end"
    assert g.codec.decode(g.seq.ids[g._prompt_len :]) == g.committed_text()


def test_first_segment_counts_only_the_drafted_characters(char_tok, bpe_tok, bpe_generalist) -> None:
    # Committed "The capit" (Generalist tokens of the committed text), then the draft "al": the
    # Generalist spells the tail " capital" with a token spanning the commit point.
    g = fresh(bpe_generalist, char_tok)
    chars = partial(char_tok.encode, add_special_tokens=False)
    units = g.extend([], chars("The capit"))
    g.accept(units[-1].s_stop)
    assert g.committed_text() == "The capit"
    units = g.extend([], chars("al"))
    assert units and units[0].s_stop == 2
    # Reference, with plain forwards: log P_G("The capital") - log P_G("The capit"), each under
    # the Generalist's own tokenization after the same prompt.
    prompt = bpe_tok.encode("Hello")
    encode = partial(bpe_tok.encode, add_special_tokens=False)

    def logp(text: str) -> float:
        ids = encode(text)
        with torch.inference_mode():
            rows = torch.log_softmax(bpe_generalist.model(torch.tensor([prompt + ids])).logits[0].float(), -1)
        return sum(float(rows[len(prompt) - 1 + i, t]) for i, t in enumerate(ids))

    assert encode("The capital")[:-1] != encode("The capit")  # a token does span the commit point
    assert units[0].logp_g == pytest.approx(logp("The capital") - logp("The capit"), abs=1e-4)


def generalist_logp(g_lm, text: str) -> float:
    """log P_G(text) under the Generalist's own tokenization after the fixture prompt, by a plain forward."""
    prompt = g_lm.tokenizer.encode("Hello")
    ids = g_lm.tokenizer.encode(text, add_special_tokens=False)
    with torch.inference_mode():
        rows = torch.log_softmax(g_lm.model(torch.tensor([prompt + ids])).logits[0].float(), -1)
    return sum(float(rows[len(prompt) - 1 + i, t]) for i, t in enumerate(ids))


def test_first_segment_after_a_recovery_counts_only_the_drafted_characters(char_tok, bpe_generalist) -> None:
    # Committed "The", then the recovery " cap" (a Generalist candidate, spelled in characters),
    # then the draft "ital": the Generalist spells " capital" as one token spanning the commit.
    g = fresh(bpe_generalist, char_tok)
    chars = partial(char_tok.encode, add_special_tokens=False)
    units = g.extend([], chars("The"))
    g.accept(units[-1].s_stop)
    cands = g.candidates(g.next_logprobs(), bpe_generalist.vocab_size)
    recovery = next(c for c in cands if char_tok.decode(c.s_tokens) == " cap")
    units = g.extend(recovery.s_tokens, chars("ital"))
    assert [u.s_stop for u in units] == [4]
    expected = generalist_logp(bpe_generalist, "The capital") - generalist_logp(bpe_generalist, "The cap")
    assert units[0].logp_g == pytest.approx(expected, abs=1e-4)


@pytest.fixture(scope="module")
def bpe_pair(bpe_tok):
    specialist = tiny_lm(bpe_tok, seed=11, name="specialist")
    return specialist, perturbed_copy(specialist, seed=22, scale=0.2)


@pytest.mark.parametrize("cross_vocab", [False, True])
def test_one_byte_level_tokenizer_through_either_path_verifies_almost_every_draft_at_gamma_zero(
    bpe_pair, cross_vocab
) -> None:
    # The random drafter writes bytes that are parts of characters; at gamma 0 everything up to
    # the last boundary both tokenizations share is accepted, so only a draft's last tokens may not.
    s_lm, g_lm = bpe_pair
    cloud = CheckingVerifier(g_lm, s_lm, seed=0, cross_vocab=cross_vocab)
    cloud.rounds_checked = 0
    verifier = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
    params = SessionParams(gamma=0.0, draft_len=8)
    out = generate(Specialist(s_lm), PROMPT, params, DecodeOptions(max_new_tokens=48), verifier)
    assert out.stats.drafted >= 40 and out.stats.accepted >= 0.8 * out.stats.drafted, out.stats
    assert "\ufffd" in out.text  # the drafts do split characters
    if cross_vocab:
        assert cloud.rounds_checked == out.stats.rounds
    else:
        assert out.stats.accepted == out.stats.drafted
