"""The pure decision rules of algorithm.md, on hand-made distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from specsteer.core.recovery import choose, device_rng, recovery_scores
from specsteer.core.session_types import CandidatePolicy
from specsteer.core.steering import (
    LOGP_FLOOR,
    RULED_OUT,
    acceptance_probability,
    align_segments,
    form_gammas,
    gated_gammas,
    is_form_text,
    steering_candidates,
    steering_values,
    top_indices,
    verify_exact_greedy,
    verify_ratios,
)


def logp(*probs: float) -> torch.Tensor:
    return torch.log(torch.tensor(probs, dtype=torch.float32))


def test_greedy_ratio_test_is_strict_and_stops_at_first_rejection() -> None:
    # P_G / P_S^0 = 1.0, 0.5, 2.0: with gamma 0.5 the second is equal, so rejected (strict >).
    ratios = [math.log(1.0), math.log(0.5), math.log(2.0)]
    assert verify_ratios(ratios, 0.5, sampling=False) == 1
    assert verify_ratios(ratios, 0.49, sampling=False) == 3


def test_gamma_zero_accepts_everything_and_infinity_nothing() -> None:
    ratios = [-30.0, 5.0, -2.0]
    assert verify_ratios(ratios, 0.0, sampling=False) == 3
    assert verify_ratios(ratios, math.inf, sampling=False) == 0
    assert verify_ratios(ratios, 0.0, sampling=True, uniforms=[0.999] * 3) == 3
    assert verify_ratios(ratios, math.inf, sampling=True, uniforms=[0.0] * 3) == 0


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("\n", True),
        ("\n\n", True),
        (" ", True),
        (",", True),
        (" -", True),
        ("();", True),
        ("`", True),
        (" the", False),
        ("a", False),
        ("2", False),
        (" é", False),
        ("中", False),  # a letter of another script
        ("٣", False),  # a digit of another script
        ("", False),  # a special token's empty text: unknown, so the paper's test decides
        ("\ufffd", False),  # a piece of a character
        (" \ufffd", False),
    ],
)
def test_form_text_is_layout_and_punctuation_only(text: str, form: bool) -> None:
    assert is_form_text(text) is form


def test_the_form_rule_tests_form_units_at_gamma_form() -> None:
    gammas = [0.5, 0.01, 0.5]  # say, from the certainty gate
    assert form_gammas(gammas, [True, False, False], 0.05) == [0.05, 0.01, 0.5]
    assert form_gammas(gammas, [True, True, True], None) == gammas  # off: the gammas as given
    assert form_gammas(gammas, [True, True, True], 0.0) == [0.0] * 3
    with pytest.raises(ValueError, match="one form flag per unit"):
        form_gammas(gammas, [True], 0.05)
    # A newline the cloud finds 5x less likely than P_S^0 does: rejected at gamma 0.5, kept under
    # the form rule at 0.1, while the word after it still meets gamma 0.5 and fails.
    ratios = [math.log(0.2), math.log(0.2)]
    assert verify_ratios(ratios, 0.5, sampling=False) == 0
    assert verify_ratios(ratios, form_gammas([0.5, 0.5], [True, False], 0.1), sampling=False) == 1


def test_the_certainty_gate_tests_each_unit_at_its_own_gamma() -> None:
    # Units where P_G's top probability is 0.9, 0.2, 0.9 (logs); certainty 0.5.
    tops = [math.log(0.9), math.log(0.2), math.log(0.9)]
    gammas = gated_gammas(tops, 0.5, certainty=0.5, gamma_uncertain=0.01)
    assert gammas == [0.5, 0.01, 0.5]
    assert gated_gammas(tops, 0.5, certainty=0.0, gamma_uncertain=0.01) == [0.5] * 3  # off: the paper's rule
    assert gated_gammas(tops, 0.5, certainty=1.0, gamma_uncertain=0.01) == [0.01] * 3
    # A draft the cloud finds 20x less likely than P_S^0 does: rejected where the cloud is certain,
    # accepted where it is not; the first unit passes either way, the third fails either way.
    ratios = [math.log(2.0), math.log(0.05), math.log(0.05)]
    assert verify_ratios(ratios, 0.5, sampling=False) == 1
    assert verify_ratios(ratios, gammas, sampling=False) == 2
    assert verify_ratios(ratios, gammas, sampling=True, uniforms=[0.99, 0.99, 0.5]) == 2
    with pytest.raises(ValueError, match="one gamma per unit"):
        verify_ratios(ratios, gammas[:2], sampling=False)


def test_sampling_acceptance_uses_the_uniform_draws() -> None:
    ratio = math.log(0.25)  # accept probability 0.25 / 0.5 = 0.5
    assert acceptance_probability(ratio, math.log(0.5)) == pytest.approx(0.5)
    assert verify_ratios([ratio], 0.5, sampling=True, uniforms=[0.49]) == 1
    assert verify_ratios([ratio], 0.5, sampling=True, uniforms=[0.51]) == 0
    with pytest.raises(ValueError, match="uniform"):
        verify_ratios([ratio], 0.5, sampling=True)


def test_nan_ratio_is_rejected() -> None:
    # 0/0: neither model allows the token. Rejected for every gamma, in both modes.
    assert verify_ratios([float("nan")], 0.0, sampling=False) == 0
    assert verify_ratios([float("nan")], 0.0, sampling=True, uniforms=[0.0]) == 0


def test_exact_greedy_rule_counts_leading_matches() -> None:
    assert verify_exact_greedy([True, True, False, True]) == 2
    assert verify_exact_greedy([]) == 0


def test_guardrail_policy_takes_generalist_top_k_literal_takes_top_v() -> None:
    logp_g = logp(0.5, 0.3, 0.15, 0.05)
    logp_s0 = logp(0.6, 0.2, 0.1999, 0.0001)  # token 3 is implausible to both, tiny P_S^0 inflates v
    ids, values = steering_candidates(logp_g, logp_s0, alpha=1.0, k=2, policy=CandidatePolicy.GUARDRAIL)
    assert ids.tolist() == [0, 1]
    assert values.tolist() == pytest.approx([math.log(0.5 / 0.6), math.log(0.3 / 0.2)], rel=1e-5)
    ids, _ = steering_candidates(logp_g, logp_s0, alpha=1.0, k=2, policy=CandidatePolicy.LITERAL)
    assert ids.tolist() == [3, 1]


def test_recovery_argmax_of_fused_scores() -> None:
    # z_rec = log P_G + alpha (log P_S^c - log P_S^0): the private model flips the choice.
    logp_g, logp_s0, logp_sc = logp(0.6, 0.4), logp(0.5, 0.5), logp(0.1, 0.9)
    ids, values = steering_candidates(logp_g, logp_s0, alpha=1.0, k=2, policy=CandidatePolicy.GUARDRAIL)
    scores = recovery_scores(values, logp_sc[ids], alpha=1.0)
    assert int(ids[choose(scores, sampling=False)]) == 1
    scores = recovery_scores(values, logp_sc[ids], alpha=0.0)
    assert int(ids[choose(scores, sampling=False)]) == 0


@pytest.mark.parametrize(
    ("alpha", "scores", "pick"), [(0.0, [0, -1, -2.5], 0), (0.5, [-3, -2, -2.5], 1), (1.0, [-6, -3, -2.5], 2)]
)
def test_recovery_weighs_the_private_model_by_alpha(alpha: float, scores: list[float], pick: int) -> None:
    """z_rec = v + alpha * log P_S^c, worked by hand: each alpha picks a different candidate, so a
    rule that drops alpha (or fixes it at 0 or 1) picks the wrong one at 0.5."""
    values = torch.tensor([0.0, -1.0, -2.5])
    logp_sc = torch.tensor([-6.0, -2.0, 0.0])
    z_rec = recovery_scores(values, logp_sc, alpha)
    assert z_rec.tolist() == scores
    assert choose(z_rec, sampling=False) == pick


def test_top_indices_break_ties_by_lower_index() -> None:
    assert top_indices(torch.tensor([1.0, 3.0, 3.0, 0.0]), 3).tolist() == [1, 2, 0]


def _law(q: list[float], p_g: list[float], p_s0: list[float], p_sc: list[float], gamma: float, k: int) -> list[float]:
    """P(y) = q(y) a(y) + (1 - sum q a) rho(y), algorithm.md's exactness check, from the raw
    probabilities in plain floats (none of the functions under test): a = min(1, P_G / (gamma
    P_S^0)); the candidates are the k most likely tokens under P_G (lower index first on ties);
    rho is proportional to exp(v + log P_S^c) = P_G * P_S^c / P_S^0 over them (alpha = 1)."""
    n = len(q)
    a = [min(1.0, p_g[y] / (gamma * p_s0[y])) for y in range(n)]
    cands = sorted(range(n), key=lambda y: (-p_g[y], y))[:k]
    weight = {y: p_g[y] * p_sc[y] / p_s0[y] for y in cands}
    total = sum(weight.values())
    rejected = 1.0 - sum(q[y] * a[y] for y in range(n))
    return [q[y] * a[y] + rejected * weight.get(y, 0.0) / total for y in range(n)]


def test_one_step_law_holds_statistically_in_sampling_mode() -> None:
    # Prepare: toy distributions over 6 tokens.
    p_g = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
    p_s0 = torch.tensor([0.10, 0.35, 0.15, 0.20, 0.15, 0.05])
    p_sc = torch.tensor([0.05, 0.35, 0.05, 0.05, 0.45, 0.05])
    gamma, k, n = 1.0, 3, 15_000
    expected = torch.tensor(_law(p_sc.tolist(), p_g.tolist(), p_s0.tolist(), p_sc.tolist(), gamma, k))
    assert float((expected - p_sc).abs().sum()) / 2 > 0.1  # steering moves the law: the test can see it
    rng = device_rng(1234)
    counts = torch.zeros(6)
    # Execute: draft ~ P_S^c, ratio test with a uniform, recovery ~ softmax(z_rec) over the top-k.
    for _ in range(n):
        d = choose(p_sc.log(), sampling=True, generator=rng)
        u = [rng.random()]
        ratio = float(p_g[d].log() - p_s0[d].log())
        if verify_ratios([ratio], gamma, sampling=True, uniforms=u) == 1:
            counts[d] += 1
            continue
        ids, values = steering_candidates(p_g.log(), p_s0.log(), alpha=1.0, k=k, policy=CandidatePolicy.GUARDRAIL)
        pick = choose(recovery_scores(values, p_sc.log()[ids], 1.0), sampling=True, generator=rng)
        counts[int(ids[pick])] += 1
    # Assert: Pearson chi-square with 5 degrees of freedom; 20.5 is the 0.999 quantile.
    chi2 = float((((counts - n * expected) ** 2) / (n * expected)).sum())
    assert chi2 < 20.5, (counts / n, expected)


def test_one_step_law_greedy_is_exact() -> None:
    p_g = torch.tensor([0.30, 0.25, 0.20, 0.25])
    p_s0 = torch.tensor([0.10, 0.50, 0.15, 0.25])
    p_sc = torch.tensor([0.05, 0.70, 0.10, 0.15])
    d = choose(p_sc.log(), sampling=False)
    assert d == 1
    # P_G(1) = 0.25 is not > 0.5 * 0.5: rejected; recovery over top-2 of P_G {0, 1(tie with 3 -> lower index)}.
    assert verify_ratios([float(p_g[d].log() - p_s0[d].log())], 0.5, sampling=False) == 0
    ids, values = steering_candidates(p_g.log(), p_s0.log(), alpha=1.0, k=2, policy=CandidatePolicy.GUARDRAIL)
    assert ids.tolist() == [0, 1]
    scores = recovery_scores(values, p_sc.log()[ids], 1.0)
    # z(0) = log .3 - log .1 + log .05 = log .15; z(1) = log .25 - log .5 + log .7 = log .35
    assert int(ids[choose(scores, sampling=False)]) == 1
    # With gamma 0.4 the same draft passes (0.25 > 0.2).
    assert verify_ratios([float(p_g[d].log() - p_s0[d].log())], 0.4, sampling=False) == 1


def test_zero_probabilities_give_finite_values_and_scores() -> None:
    # P_S^0(1) = 0 and P_G(2) = 0: v stays finite (the wire refuses anything else).
    logp_g, logp_s0 = logp(0.5, 0.5, 0.0), logp(0.5, 0.0, 0.5)
    values = steering_values(logp_g, logp_s0, alpha=1.0)
    assert torch.isfinite(values).all()
    # P_S^0 = 0 enters as the floor; P_G = 0 is ruled out, whatever P_S^0 says.
    assert values.tolist() == pytest.approx([0.0, math.log(0.5) - LOGP_FLOOR, RULED_OUT], abs=1e-5)
    # P_S^c(1) = 0 too: the personal terms cancel and the fused score is log P_G.
    scores = recovery_scores(values, logp(0.5, 0.0, 0.5), alpha=1.0)
    assert scores.tolist() == pytest.approx([math.log(0.5), math.log(0.5), RULED_OUT], abs=1e-5)
    ids, vals = steering_candidates(logp_g, logp_s0, alpha=1.0, k=3, policy=CandidatePolicy.LITERAL)
    assert ids.tolist() == [1, 0, 2] and torch.isfinite(vals).all()
    # The ratio test is exact: P_G > gamma * 0 passes, 0 > gamma * 0 does not.
    assert verify_ratios([float(logp_g[1] - logp_s0[1])], 1000.0, sampling=False) == 1
    assert verify_ratios([float(logp(0.0)[0] - logp(0.0)[0])], 0.0, sampling=False) == 0


def test_align_segments_cuts_at_shared_boundaries() -> None:
    # Text "ab cd" committed at 0; Specialist pieces "a","b"," c","d"; Generalist "ab"," cd".
    segments = align_segments([1, 2, 4, 5], [2, 5], commit_end=0)
    assert [(s.s_start, s.s_stop, s.g_start, s.g_stop, s.end) for s in segments] == [(0, 2, 0, 1, 2), (2, 4, 1, 2, 5)]


def test_align_segments_generalist_token_spanning_the_commit_point_joins_first_segment() -> None:
    # Committed "xy" (ends at 2); the Generalist re-tokenized "x","yz" from 0; draft "z" ends at 3.
    segments = align_segments([3], [1, 3], commit_end=2)
    assert [(s.g_start, s.g_stop) for s in segments] == [(1, 2)]


def test_align_segments_never_closes_inside_a_character_or_past_last_shared_boundary() -> None:
    segments = align_segments([None, 2, 3], [2, 4], commit_end=0)
    assert [(s.s_start, s.s_stop) for s in segments] == [(0, 2)]  # token 2 ends at 3: not shared


def test_top_indices_matches_a_full_stable_sort_with_ties_and_infinities() -> None:
    from specsteer.core.steering import top_indices

    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = int(torch.randint(1, 300, (1,), generator=gen))
        # Few distinct values, so ties cross the k-th place often; some -inf (masked tokens).
        scores = torch.randint(0, 6, (n,), generator=gen).float()
        scores[torch.rand(n, generator=gen) < 0.1] = -torch.inf
        k = int(torch.randint(1, n + 2, (1,), generator=gen))
        expected = torch.sort(scores, descending=True, stable=True).indices[:k]
        assert torch.equal(top_indices(scores, k), expected), trial


def test_top_indices_never_sorts_the_whole_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    # A full stable sort of a 152k-entry row cost tens of ms per steering call; only the top is sorted now.
    from specsteer.core.steering import top_indices

    sorted_sizes: list[int] = []
    real_sort = torch.sort

    def recording_sort(x: torch.Tensor, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        sorted_sizes.append(x.shape[-1])
        return real_sort(x, *args, **kwargs)

    monkeypatch.setattr(torch, "sort", recording_sort)
    row = torch.log_softmax(torch.randn(151_936, generator=torch.Generator().manual_seed(1)), dim=-1)
    top = top_indices(row, 40)
    assert torch.equal(top, real_sort(row, descending=True, stable=True).indices[:40])
    assert max(sorted_sizes) < 1000


def _whole_inverse_cdf(scores: np.ndarray, temperature: float, uniform: float) -> int:
    """The draw as one float64 cumulative sum over every entry (the reference, and the old code)."""
    logits = scores.astype(np.float64) / temperature
    cumulative = np.cumsum(np.exp(logits - logits.max()))
    return int(min(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"), len(cumulative) - 1))


def test_a_sampled_draw_is_the_whole_inverse_cdf_in_two_levels() -> None:
    from specsteer.core.recovery import DRAW_BLOCK

    # Prepare: vocabularies around the block size, a tail block, masked tokens, temperatures.
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.choice([1, 7, DRAW_BLOCK - 1, DRAW_BLOCK, DRAW_BLOCK + 1, 3 * DRAW_BLOCK + 17, 151_936]))
        scores = (rng.standard_normal(n) * 4).astype(np.float32)
        scores[rng.random(n) < 0.3] = -np.inf
        scores[int(rng.integers(n))] = 0.0  # at least one token with weight
        temperature = float(rng.choice([1.0, 0.7, 1.5]))
        seed = int(rng.integers(1 << 30))
        # Execute
        got = choose(scores, sampling=True, temperature=temperature, generator=device_rng(seed))
        # Assert: the same token as one cumulative sum over everything, never a masked one.
        assert got == _whole_inverse_cdf(scores, temperature, device_rng(seed).random()), trial
        assert np.isfinite(scores[got]), trial


def test_a_sampled_draw_never_cumulates_the_whole_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding: a sampled token (every draft, recovery and bonus the device draws in sampling mode)
    cumulated all 152k weights in float64: 2.0 ms a draw on this CPU, a tenth of the int4 drafter's
    19 ms step (bench.sampling_draw: 0.3 ms now). Now it sums blocks, then cumulates one."""
    cumulated: list[int] = []
    real_cumsum = np.cumsum

    def recording_cumsum(a, *args, **kwargs):  # type: ignore[no-untyped-def]
        cumulated.append(np.size(a))
        return real_cumsum(a, *args, **kwargs)

    monkeypatch.setattr(np, "cumsum", recording_cumsum)
    row = np.random.default_rng(1).standard_normal(151_936).astype(np.float32)
    got = choose(row, sampling=True, generator=device_rng(3))
    monkeypatch.setattr(np, "cumsum", real_cumsum)
    assert got == _whole_inverse_cdf(row, 1.0, device_rng(3).random())
    assert cumulated and max(cumulated) <= 2048  # block sums, then one block's entries
