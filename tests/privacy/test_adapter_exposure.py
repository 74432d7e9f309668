"""Exposure of a canary in a model's own likelihoods: exact scores over the whole secret space,
exact ranks, and the planting of canary entries (no training here: tests/federation trains)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from specsteer.core.models import CausalLM
from specsteer.privacy.adapter_exposure import (
    CanaryRecord,
    canary_prompt_ids,
    exposure_summary,
    likelihood_exposures,
    likelihood_rank,
    model_exposures,
    plant_canary_records,
    random_rank_exceedance,
    secret_index,
    secret_log_likelihoods,
    secret_log_likelihoods_bruteforce,
)
from specsteer.privacy.leakage import CanarySpace, exposure, exposure_from_rank
from tests.tinymodels import scripted_lm, tiny_lm


@pytest.mark.parametrize("tokenizer", ["bpe_tok", "char_tok"])
@pytest.mark.parametrize(
    "space", [CanarySpace(length=2), CanarySpace(template="code {secret}!", alphabet="ab0", length=4)]
)
def test_tree_scoring_equals_scoring_each_secret_alone(request, tokenizer, space) -> None:
    # Prepare: the BPE merges some digit runs ("00", " 100"), so secrets tokenize to different
    # lengths and the trie is ragged; a small chunk forces many chunks with ancestors carried over.
    tok = request.getfixturevalue(tokenizer)
    lm = tiny_lm(tok, seed=5, hidden=32, heads=2)
    prompt = canary_prompt_ids(lm, "Note the PIN")
    # Execute
    tree = secret_log_likelihoods(lm, prompt, space, chunk_tokens=len(prompt) + 24)
    alone = secret_log_likelihoods_bruteforce(lm, prompt, space)
    # Assert: the same log-likelihood for every secret, hence the same exact ranks.
    assert tree.shape == (space.size,)
    np.testing.assert_allclose(tree, alone, rtol=0, atol=1e-4)
    for i in (0, 7, space.size - 1):
        assert likelihood_rank(tree, i) == likelihood_rank(alone, i)


def test_secret_index_is_the_order_of_all_secrets() -> None:
    space = CanarySpace(alphabet="xyz", length=3)
    assert [secret_index(space, s) for s in space.all_secrets()] == list(range(27))
    with pytest.raises(ValueError):
        secret_index(space, "xxa")


def test_rank_and_exposure_follow_the_uplink_convention() -> None:
    # Prepare: a space of 100; secret 42 scores best, 7 and 8 tie below it, the rest are worse.
    space = CanarySpace(length=2)
    scores = np.linspace(-100.0, -50.0, 100)
    scores[42], scores[7], scores[8] = 0.0, -1.0, -1.0
    # Execute
    best, tied, worst = likelihood_exposures(space, scores, ["42", "07", "00"])
    # Assert: rank 1 is log2|R| bits; a tie counts half; the worst is rank |R| (0 bits).
    assert (best.rank, best.exposure) == (1.0, pytest.approx(math.log2(100)))
    assert tied.rank == 2.5 and tied.exposure == pytest.approx(exposure_from_rank(2.5, 100))
    assert worst.rank == 100.0 and worst.exposure == pytest.approx(0.0)
    # The same numbers privacy.leakage.exposure gives when handed every other secret's score.
    others = np.delete(scores, 7)
    assert tied.exposure == pytest.approx(exposure(scores[7], others, space.size))
    assert best.log_likelihood == 0.0 and "secret" not in best.as_dict(reveal=False)
    with pytest.raises(ValueError):
        likelihood_exposures(space, scores[:50], ["42"])


def test_a_model_that_wrote_the_canary_exposes_it_and_only_it(char_tok) -> None:
    # Prepare: a bigram model that, after " ", writes 4, then 8, 3, 9: it has "memorized" 4839.
    record = CanaryRecord(CanarySpace(length=4))
    ids = {c: char_tok.convert_tokens_to_ids(c) for c in " 4839"}
    lm = scripted_lm(char_tok, {ids[" "]: ids["4"], ids["4"]: ids["8"], ids["8"]: ids["3"], ids["3"]: ids["9"]})
    # Execute
    planted, near, control = model_exposures(lm, record, ["4839", "4830", "1234"])
    # Assert: the memorized secret ranks first of 10,000; one that shares its first three digits
    # ranks high; an unrelated one is exactly what a model that knows nothing gives.
    assert planted.rank == 1.0 and planted.exposure == pytest.approx(record.space.bits)
    assert 5.0 < near.exposure < planted.exposure
    assert control.exposure < 5.0


def test_scores_of_a_diverged_model_are_refused(char_tok) -> None:
    lm = tiny_lm(char_tok, seed=1, hidden=32, heads=2)
    with torch.no_grad():
        lm.model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        model_exposures(CausalLM.from_parts("nan", lm.model, char_tok), CanaryRecord(CanarySpace(length=2)), ["11"])


def test_planted_copies_go_among_the_trained_entries() -> None:
    # Prepare
    record = CanaryRecord(CanarySpace(length=6), subject="Note the PIN")
    user = {"user_id": "u1", "profile": [{"subject": f"s{i}", "body": f"b{i}", "time": 100 + i} for i in range(10)]}
    # Execute
    planted = plant_canary_records(user, record, "483920", 3, random.Random(0), keep_last=4)
    # Assert: 3 copies, none among the newest 4 (held out), times still in order, input untouched.
    entries = planted["profile"]
    assert len(entries) == 13 and len(user["profile"]) == 10 and planted["user_id"] == "u1"
    assert entries[-4:] == user["profile"][-4:]
    copies = [e for e in entries if e["body"] == "my PIN is 483920"]
    assert len(copies) == 3 and all(e["subject"] == "Note the PIN" for e in copies)
    times = [e["time"] for e in entries]
    assert times == sorted(times)
    with pytest.raises(ValueError):
        plant_canary_records(user, record, "483920", 0, random.Random(0), keep_last=4)


def test_exposure_summary_and_the_random_baseline() -> None:
    assert exposure_summary([3.0, 1.0, 2.0, 10.0]) == {"count": 4, "mean": 4.0, "median": 2.5, "min": 1.0, "max": 10.0}
    assert exposure_summary([]) == {"count": 0}
    assert random_rank_exceedance(3.0) == 0.125
