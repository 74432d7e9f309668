"""The cloud prefills a session's prompt at Open, so every round feeds only its own block."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from specsteer.core.kv import TokenSequence, single_forward
from specsteer.core.session_types import Method, SessionParams
from specsteer.server.session import CloudVerifier
from tests.tinymodels import perturbed_copy, tiny_lm

PROMPT = "Write the body of a git commit message for this subject line.\n\nSubject: refs: speed up lookups"


class RecordingRunner:
    """Runs each forward alone and records (which model, how many new ids)."""

    def __init__(self) -> None:
        self.fed: list[tuple[int, int]] = []

    def __call__(self, seq: TokenSequence, new: Sequence[int]) -> torch.Tensor:
        self.fed.append((id(seq.model), len(new)))
        return single_forward(seq, new)


@pytest.fixture(scope="module")
def same_vocab_pair(smol_tok):
    s_lm = tiny_lm(smol_tok, seed=5, name="specialist")
    return s_lm, perturbed_copy(s_lm, seed=6)


def _open(pair, params: SessionParams):
    s_lm, g_lm = pair
    runner = RecordingRunner()
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    prompt_ids = s_lm.tokenizer.encode(PROMPT)
    return cloud.open(prompt_ids, params, runner=runner), runner, s_lm, g_lm


def test_open_prefills_both_models_and_a_round_feeds_only_its_block(same_vocab_pair) -> None:
    # Prepare / Execute: open a SpecSteer session (it reads P_G and P_S^0).
    session, runner, s_lm, g_lm = _open(same_vocab_pair, SessionParams(gamma=0.5, draft_len=4))
    # Assert: Open ran one prompt-sized forward per cloud model.
    assert sorted(m for m, _ in runner.fed) == sorted([id(g_lm.model), id(s_lm.model)])
    assert all(n > 10 for _, n in runner.fed)
    runner.fed.clear()
    # Execute: a first round, then a second that commits one token after the verdict.
    draft = s_lm.tokenizer.encode(" fix the cache")[:4]
    verdict = session.round((), draft)
    first = list(runner.fed)
    runner.fed.clear()
    assert verdict.steering is not None
    session.round(verdict.steering.candidates[0], draft)
    # Assert: each round's forwards are its block alone (the draft; the commit plus the draft),
    # never the prompt again.
    assert first and all(n <= len(draft) for _, n in first)
    assert runner.fed and all(n <= 1 + 4 for _, n in runner.fed)


@pytest.mark.parametrize(
    "params", [SessionParams(method=Method.LLM, draft_len=0, alpha=0.0), SessionParams(method=Method.SD)]
)
def test_open_skips_the_generic_specialist_when_the_session_never_reads_it(same_vocab_pair, params) -> None:
    # Prepare / Execute
    _, runner, _, g_lm = _open(same_vocab_pair, params)
    # Assert: only the Generalist's prompt was fed.
    assert [m for m, _ in runner.fed] == [id(g_lm.model)]
