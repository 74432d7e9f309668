"""The device's repetition stop (`DecodeOptions.no_repeat_ngram`, `core.repetition`): no token the
device drafts, recovers or writes alone completes an n-gram the generated text already holds; the
prompt (with the retrieved history) is not counted. The oracle on tiny models, greedy, is in
tests/test_oracles.py; this holds the rule itself, the recovery's candidates, sampling and bad input."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specsteer.core.errors import ConfigError
from specsteer.core.recovery import device_rng
from specsteer.core.repetition import completes_repeat, repeating_candidates, repeating_tokens
from specsteer.core.session_types import FusionVector, Method, SessionParams, SteeringVector, Verdict
from specsteer.sdk.decoding import DecodeOptions, Specialist, _recover, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import perturbed_copy, tiny_lm


def brute_force(tokens: list[int], n: int) -> list[int]:
    grams = {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}
    return sorted({g[-1] for g in grams if list(g[:-1]) == tokens[len(tokens) - n + 1 :]})


def repeats(tokens: list[int], n: int) -> int:
    """How many of `tokens` complete an n-gram that came before them."""
    return sum(t in brute_force(tokens[:i], n) for i, t in enumerate(tokens))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_repeating_tokens_are_the_next_tokens_of_every_earlier_run_of_the_last_n_minus_1(n) -> None:
    rng = random.Random(n)
    for _ in range(300):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(0, 30))]  # 4 tokens: runs repeat often
        assert repeating_tokens(tokens, n).tolist() == brute_force(tokens, n)
    assert repeating_tokens([1, 2, 1, 2], 0).size == 0  # off


def test_a_multi_token_candidate_repeats_if_any_of_its_tokens_does_as_the_text_grows() -> None:
    text = [5, 1, 2, 3, 1, 2]
    assert completes_repeat(text, (3,), 3)  # 1 2 3 again
    assert completes_repeat(text, (4, 1, 2), 3) is False  # 1 2 4, 2 4 1, 4 1 2: none twice
    assert completes_repeat(text, (3, 9), 3)  # its first token already repeats 1 2 3
    assert completes_repeat([7, 8, 9, 7], (8, 9), 3)  # its second token does: 7 8 9 again
    assert not completes_repeat(text, (3,), 0)
    # A recovery asks for all its candidates at once: the same answers, the text's own stop found once.
    rng = random.Random(0)
    for _ in range(300):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(0, 20))]
        candidates = [tuple(rng.randrange(4) for _ in range(rng.randrange(1, 4))) for _ in range(5)]
        assert repeating_candidates(tokens, candidates, 3) == [completes_repeat(tokens, c, 3) for c in candidates]


@pytest.mark.parametrize("n", [1, -1])
def test_a_stop_of_one_token_or_less_is_refused_with_a_sentence(n) -> None:
    with pytest.raises(ConfigError, match="no_repeat_ngram must be 0 \\(off\\) or a length of 2 tokens or more"):
        DecodeOptions(no_repeat_ngram=n)


class _Generated:
    """A device sequence for `_recover`: the prompt, then the generated tokens; P_S^c uniform."""

    def __init__(self, prompt: list[int], generated: list[int], vocab: int = 16) -> None:
        self.ids = [*prompt, *generated]
        self.vocab = vocab

    def next_logprobs(self) -> np.ndarray:
        return np.full(self.vocab, -np.log(self.vocab), dtype=np.float32)

    def score_continuations(self, continuations) -> np.ndarray:
        return np.array([-np.log(self.vocab) * len(c) for c in continuations], dtype=np.float32)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_a_recovery_leaves_out_the_candidates_that_repeat_unless_every_one_does(alpha) -> None:
    params, options = SessionParams(alpha=alpha), DecodeOptions(no_repeat_ngram=2)
    # The prompt holds 4 7 (retrieved history is not counted); the generated text holds 4 9.
    seq = _Generated(prompt=[4, 7], generated=[4, 9, 4])
    best_repeats = Verdict(0, SteeringVector(((9,), (7,), (3,)), (0.0, -1.0, -2.0)))
    assert _recover(seq, best_repeats, params, DecodeOptions(), device_rng(0), start=2) == (9,)  # off
    assert _recover(seq, best_repeats, params, options, device_rng(0), start=2) == (7,)
    assert _recover(seq, best_repeats, params, options, device_rng(0), start=0) == (3,)  # 4 7 counted too
    every_one = Verdict(0, SteeringVector(((9,), (9, 3)), (0.0, -1.0)))
    assert _recover(seq, every_one, params, options, device_rng(0), start=2) == (9,)  # a token must be committed
    multi = Verdict(0, SteeringVector(((5, 4, 9), (3,)), (0.0, -1.0)))  # its last token repeats 4 9
    assert _recover(seq, multi, params, options, device_rng(0), start=2) == (3,)
    fused = Verdict(0, FusionVector(np.arange(16, dtype="<f4")[::-1].copy().tobytes()))  # token 0 best
    assert _recover(_Generated([1], [1, 0, 1]), fused, params, options, device_rng(0), start=1) == (1,)  # 1 0 again
    assert _recover(_Generated([1], [1, 0, 1]), fused, params, options, device_rng(0), start=0) == (2,)  # and 1 1


@pytest.fixture(scope="module")
def pair(char_tok):
    specialist = tiny_lm(char_tok, seed=11, name="specialist")
    return Specialist(specialist), perturbed_copy(specialist, seed=22, scale=0.2)


@pytest.mark.parametrize("method", [Method.SPECSTEER, Method.SLM])
def test_sampled_texts_under_the_stop_repeat_no_n_gram(pair, method) -> None:
    specialist, generalist = pair
    cloud = CloudVerifier(generalist, specialist.lm, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=specialist.lm.vocab_size)
    params = SessionParams(method=method, sampling=True, gamma=0.5)
    found = {}
    for n in (0, 2):
        texts = [
            generate(specialist, "note ab", params, DecodeOptions(48, seed=s, no_repeat_ngram=n), verifier).token_ids
            for s in range(4)
        ]
        found[n] = sum(repeats(t, 2) for t in texts)
    assert found[0] > 0, "the sampled texts must repeat a bigram without the stop, or the test sees nothing"
    assert found[2] == 0
