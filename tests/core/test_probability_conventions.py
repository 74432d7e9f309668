"""How the decision rules treat extreme log-probabilities (algorithm.md, "Probability 0, NaN and gamma = 0"):
finite values enter as computed, probability 0 has one convention on both sides, NaN is refused,
and gamma = 0 accepts every draft in both modes. References are computed here from the spec's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from specsteer.core.errors import ModelLoadError
from specsteer.core.recovery import choose, device_rng, recovery_scores
from specsteer.core.session_types import CandidatePolicy
from specsteer.core.steering import (
    RULED_OUT,
    acceptance_probability,
    log_gamma,
    log_softmax,
    steering_candidates,
    steering_values,
    top_indices,
    verify_ratios,
)

# Peaked rows: token 1 is very unlikely under both Specialist views, far below log(float32 tiny)
# = -87.34, but much less so under P_S^c (-100) than under P_S^0 (-150).
LOGP_G = log_softmax(torch.tensor([0.0, -1.0, -5.0]))
LOGP_S0 = log_softmax(torch.tensor([0.0, -150.0, 0.0]))
LOGP_SC = log_softmax(torch.tensor([0.0, -100.0, 0.0]))


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.5])
def test_finite_log_probabilities_enter_values_and_scores_as_computed(alpha: float) -> None:
    ids, values = steering_candidates(LOGP_G, LOGP_S0, alpha=alpha, k=2, policy=CandidatePolicy.GUARDRAIL)
    assert ids.tolist() == [0, 1]
    spec_v = LOGP_G[ids] - alpha * LOGP_S0[ids]  # v = log P_G - alpha log P_S^0, nothing clamped
    assert torch.equal(values, spec_v)
    scores = recovery_scores(values.numpy(), LOGP_SC.numpy()[ids.numpy()], alpha)
    spec_z = (spec_v + alpha * LOGP_SC[ids]).numpy()
    np.testing.assert_allclose(scores, spec_z, rtol=1e-6)
    # The spec's recovery picks token 1 (z = log P_G + alpha * 50); a floor at -87.34 picked token 0.
    assert int(ids[choose(scores, sampling=False)]) == 1


def test_the_literal_ranking_orders_finite_tail_values_exactly() -> None:
    # Tokens 1 and 2 both lie below the old floor under P_S^0; v ranks them by their true values.
    logp_g = log_softmax(torch.tensor([0.0, -2.0, -1.0, -3.0]))
    logp_s0 = log_softmax(torch.tensor([0.0, -120.0, -100.0, 0.0]))
    ids, values = steering_candidates(logp_g, logp_s0, alpha=1.0, k=4, policy=CandidatePolicy.LITERAL)
    spec_v = logp_g - logp_s0
    assert ids.tolist() == torch.sort(spec_v, descending=True, stable=True).indices.tolist() == [1, 2, 0, 3]
    assert torch.equal(values, spec_v[ids])


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 2.0, 10.0])
@pytest.mark.parametrize("policy", list(CandidatePolicy))
def test_a_token_the_generalist_rules_out_never_outranks_one_it_allows(alpha: float, policy: CandidatePolicy) -> None:
    # Token 2: P_G = P_S^0 = 0 (a floor on both gave v = (1 - alpha) * floor > 0 for alpha > 1);
    # token 3: P_G = 0 only. Tokens 0 and 1 are real candidates with small values.
    logp_g = torch.log(torch.tensor([0.6, 0.4, 0.0, 0.0]))
    logp_s0 = torch.log(torch.tensor([0.7, 0.2, 0.0, 0.1]))
    ids, values = steering_candidates(logp_g, logp_s0, alpha=alpha, k=4, policy=policy)
    assert set(ids.tolist()[:2]) == {0, 1} and ids.tolist()[2:] == [2, 3]
    assert torch.isfinite(values).all() and values.tolist()[2:] == [RULED_OUT, RULED_OUT]
    # The device never recovers to them: greedy, or sampled at any temperature.
    logp_sc = torch.log(torch.tensor([0.1, 0.1, 0.0, 0.8]))[ids].numpy()
    scores = recovery_scores(values.numpy(), logp_sc, alpha)
    assert int(ids[choose(scores, sampling=False)]) in (0, 1)
    rng = device_rng(0)
    for temperature in (0.3, 1.0, 4.0):
        drawn = {int(ids[choose(scores, sampling=True, temperature=temperature, generator=rng)]) for _ in range(200)}
        assert drawn <= {0, 1}


def test_probability_zero_under_the_specialists_keeps_its_convention() -> None:
    # P_S^0(1) = 0: v = log P_G - alpha * log(float32 tiny); P_S^c(1) = 0 too: z = log P_G.
    logp_g, logp_s0 = torch.log(torch.tensor([0.5, 0.5])), torch.log(torch.tensor([1.0, 0.0]))
    values = steering_values(logp_g, logp_s0, 2.0)
    assert torch.isfinite(values).all()
    z = recovery_scores(values.numpy(), np.array([0.0, -np.inf], dtype=np.float32), 2.0)
    np.testing.assert_allclose(z, np.log([0.5, 0.5]), atol=1e-5)


def test_gamma_zero_treats_a_draft_the_generalist_rules_out_alike_in_both_modes() -> None:
    # Greedy rejected it (0 > 0 * P_S^0 is false) while sampling accepted it (0/0 read as 1). Both
    # now follow the limit gamma -> 0+ (0 / (gamma P_S^0) = 0): rejected, like every gamma > 0,
    # while every draft P_G allows is accepted, however small its ratio.
    ruled_out = -math.inf  # log P_G(d) - log P_S^0(d) with P_G(d) = 0
    zero_over_zero = math.nan  # P_G(d) = P_S^0(d) = 0
    for gamma in (0.0, 1e-9, 0.5):
        for ratio in (ruled_out, zero_over_zero):
            assert verify_ratios([ratio], gamma, sampling=False) == 0
            assert verify_ratios([ratio], gamma, sampling=True, uniforms=[0.0]) == 0
            assert acceptance_probability(ratio, log_gamma(gamma)) == 0.0
    allowed = [1.0, -40.0, -1e30]
    assert verify_ratios([*allowed, ruled_out], 0.0, sampling=False) == 3
    assert verify_ratios([*allowed, ruled_out], 0.0, sampling=True, uniforms=[0.999999] * 4) == 3


def test_nan_log_probabilities_are_refused_not_decoded() -> None:
    row = log_softmax(torch.tensor([0.0, float("nan"), 1.0]))  # one NaN logit: the whole row is NaN
    ok = log_softmax(torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ModelLoadError, match="NaN"):
        steering_candidates(row, ok, alpha=1.0, k=2, policy=CandidatePolicy.GUARDRAIL)
    with pytest.raises(ModelLoadError, match="NaN"):
        steering_candidates(ok, row, alpha=1.0, k=2, policy=CandidatePolicy.GUARDRAIL)
    with pytest.raises(ModelLoadError, match="NaN"):
        top_indices(row, 2)
    with pytest.raises(ModelLoadError, match="NaN"):
        choose(row.numpy(), sampling=False)
    with pytest.raises(ModelLoadError, match="NaN"):
        choose(row.numpy(), sampling=True, generator=device_rng(0))
    with pytest.raises(ModelLoadError, match="NaN"):
        recovery_scores(np.array([0.0, 1.0], dtype=np.float32), row.numpy()[:2], 1.0)
    # alpha = 0 never reads P_S^0: its row is not consulted.
    ids, _ = steering_candidates(ok, row, alpha=0.0, k=2, policy=CandidatePolicy.GUARDRAIL)
    assert ids.tolist() == [2, 1]
