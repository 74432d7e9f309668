"""The leakage metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specsteer.core import wire
from specsteer.privacy.leakage import (
    MAX_RANKED_SPACE,
    CanarySpace,
    auroc,
    canary_exposure,
    canary_rank,
    canary_readings,
    canary_scores,
    counterfactual_ngram_leakage,
    exposure,
    exposure_from_rank,
    membership_score,
    ngrams,
    plant_canary,
    roc_curve,
    size_channel,
    support_score,
    tpr_at_fpr,
)

# -- canaries --------------------------------------------------------------------------------------


def test_canary_space() -> None:
    space = CanarySpace()
    assert space.size == 10**6 and space.bits == pytest.approx(6 * math.log2(10))
    assert space.render("012345") == "my PIN is 012345"
    with pytest.raises(ValueError):
        space.render("12345")
    with pytest.raises(ValueError):
        CanarySpace(template="no slot")
    rng = np.random.default_rng(0)
    drawn = space.sample(rng, 50, exclude=["000000"])
    assert len(set(drawn)) == 50 and "000000" not in drawn and all(len(s) == 6 for s in drawn)
    small = CanarySpace(alphabet="ab", length=3)
    assert small.all_secrets() == ["aaa", "aab", "aba", "abb", "baa", "bab", "bba", "bbb"]
    with pytest.raises(ValueError):
        small.sample(rng, 8, exclude=["aaa"])


def test_exposure_hand_values() -> None:
    assert exposure_from_rank(1, 1024) == 10.0
    assert exposure_from_rank(1024, 1024) == 0.0
    # Exact enumeration of a space of 8: the canary beats all 7 others -> rank 1 -> 3 bits.
    assert exposure(5.0, [1, 2, 3, 4, 1, 2, 3], 8) == 3.0
    # Two beat it, one ties: rank = 1 + 2 + 0.5 = 3.5.
    assert exposure(3.0, [4, 5, 3, 1, 1, 1, 1], 8) == pytest.approx(3 - math.log2(3.5))
    # Every score equal (a stream that says nothing): rank 1 + 7/2 = 4.5 of 8, about 0.83 bits.
    assert exposure(0.0, [0.0] * 7, 8) == pytest.approx(3 - math.log2(4.5))
    # A sample of 4 rivals from a space of 1001: one of four beats it -> rank 1 + 1000/4 = 251.
    assert exposure(2.0, [3.0, 1.0, 1.0, 1.0], 1001) == pytest.approx(math.log2(1001) - math.log2(251))
    with pytest.raises(ValueError):
        exposure(1.0, [], 10)
    with pytest.raises(ValueError):
        exposure(1.0, [0.0] * 10, 10)


def test_support_score_prefers_the_canary_the_stream_spells_out() -> None:
    stream = "lorem\nmy PIN is 4029 and more"
    assert support_score("my PIN is 402913", "402913", stream) == pytest.approx(14 + 4 / 7)
    assert support_score("my PIN is 402999", "402999", stream) == pytest.approx(14 + 4 / 7)
    assert support_score("my PIN is 123456", "123456", stream) < support_score("my PIN is 402913", "402913", stream)
    # Digits elsewhere in the stream only break ties below one prefix character.
    assert support_score("my PIN is 777777", "777777", "x 777777") == pytest.approx(0 + 6 / 7)


def test_exposure_end_to_end_on_a_small_space() -> None:
    space = CanarySpace(template="pin {secret}", alphabet="0123", length=4)
    secret = "3102"
    others = [s for s in space.all_secrets() if s != secret]
    leaky = "text pin 3102 text"
    e = exposure(canary_scores(space, [secret], leaky)[0], canary_scores(space, others, leaky), space.size)
    assert e == pytest.approx(space.bits)  # exact rank 1 of 256
    silent = "text without it"
    e0 = exposure(canary_scores(space, [secret], silent)[0], canary_scores(space, others, silent), space.size)
    assert e0 < 2.0


def _rank_by_scoring_everyone(space: CanarySpace, secret: str, stream: str) -> float:
    """The reference: `support_score` of every other secret, ranked as `exposure` ranks them."""
    true = canary_scores(space, [secret], stream)[0]
    others = canary_scores(space, [s for s in space.all_secrets() if s != secret], stream)
    return 1.0 + float(np.sum(others > true)) + 0.5 * float(np.sum(others == true))


@pytest.mark.parametrize(
    ("template", "alphabet", "length"),
    [("my PIN is {secret}", "0123", 4), ("{secret}", "01", 5), ("k{secret}!", "012", 3), ("pin {secret} end", "ab", 4)],
)
def test_canary_rank_equals_scoring_every_secret(template: str, alphabet: str, length: int) -> None:
    space = CanarySpace(template=template, alphabet=alphabet, length=length)
    rng = np.random.default_rng(length)
    everyone = space.all_secrets()
    for _ in range(25):
        secret = everyone[int(rng.integers(len(everyone)))]
        rendered = space.render(secret)
        pieces = [
            rendered[: int(rng.integers(0, len(rendered) + 1))],
            space.render(everyone[int(rng.integers(len(everyone)))]),
            secret[int(rng.integers(0, length)) :],
            "".join(rng.choice(list(alphabet + " kpin!my"), int(rng.integers(0, 10)))),
        ]
        stream = "\n".join(p for p in pieces if rng.random() < 0.7)
        assert canary_rank(space, secret, stream) == _rank_by_scoring_everyone(space, secret, stream), stream
        # Exposure is the most of the stream's readings (as written, folded, reversed), each ranked exactly.
        assert canary_exposure(space, secret, stream) == pytest.approx(
            max(
                exposure_from_rank(_rank_by_scoring_everyone(sp, sec, text), space.size)
                for sp, sec, text in canary_readings(space, secret, stream)
            )
        )


def test_canary_rank_of_a_partial_leak_in_the_full_space() -> None:
    space = CanarySpace()  # 10^6 secrets
    # Four of six digits went up: the 100 secrets starting 4029 tie (the others rank below them),
    # so the canary's rank is 1 + 99/2 whatever sample of rivals one would have drawn.
    assert canary_rank(space, "402913", "so: my PIN is 4029 (cut)") == 50.5
    assert canary_exposure(space, "402913", "my PIN is 402913") == pytest.approx(space.bits)
    # Nothing of it: every secret ties, rank (10^6 + 1) / 2, about one bit.
    assert canary_rank(space, "402913", "no digits here") == (space.size + 1) / 2
    with pytest.raises(ValueError, match="too large"):
        canary_rank(CanarySpace(length=9), "123456789", "")
    assert CanarySpace(length=8).size <= MAX_RANKED_SPACE


def test_plant_canary() -> None:
    rng = np.random.default_rng(3)
    bodies, i = plant_canary(["a", "b\n", ""], "my PIN is 1", rng)
    assert bodies[i].endswith("my PIN is 1") and sum("my PIN" in b for b in bodies) == 1
    with pytest.raises(ValueError):
        plant_canary([], "x", rng)


# -- n-grams and membership -------------------------------------------------------------------------


def test_ngrams_stay_within_sequences() -> None:
    assert ngrams([[1, 2, 3], [4, 5]], 2) == {(1, 2), (2, 3), (4, 5)}
    assert ngrams([[1, 2]], 3) == set()
    with pytest.raises(ValueError):
        ngrams([[1]], 0)


def test_counterfactual_ngram_leakage_hand_values() -> None:
    profile_real = [[1, 2, 3, 4, 5]]  # bigrams 12 23 34 45
    profile_swapped = [[3, 4, 9]]  # removes 34
    prompts = [[4, 5]]  # removes 45 -> specific = {12, 23}
    uplink_real = [[1, 2, 3, 7]]  # 12 23 37: two specific
    uplink_swapped = [[2, 3]]  # 23 also happens without the profile -> leaked = {12}
    r = counterfactual_ngram_leakage(uplink_real, uplink_swapped, profile_real, profile_swapped, prompts, n=2)
    assert (r.profile_specific, r.uplink_ngrams, r.leaked) == (2, 3, 1)
    assert r.share_of_profile == 0.5 and r.share_of_uplink == pytest.approx(1 / 3)
    assert r.as_dict()["leaked"] == 1


def test_membership_score() -> None:
    doc = [1, 2, 3, 4, 5, 6]  # trigrams 123 234 345 456
    assert membership_score([[9, 2, 3, 4, 5]], doc, n=3) == 0.5
    assert membership_score([[2, 3, 4]], doc, n=3, exclude=[[2, 3, 4]]) == 0.0
    assert membership_score([[1]], [1, 2], n=3) == 0.0


def test_auroc_hand_values() -> None:
    # Pairs (pos > neg): 0.9 beats both, 0.8 beats both, 0.4 beats only 0.3: 5 of 6.
    assert auroc([0.9, 0.8, 0.4], [0.5, 0.3]) == pytest.approx(5 / 6)
    assert auroc([1, 1], [1, 1]) == 0.5  # ties count half
    assert auroc([2], [1]) == 1.0 and auroc([1], [2]) == 0.0
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 300), rng.normal(0, 1, 400)
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert auroc(pos, neg) == pytest.approx(brute)
    with pytest.raises(ValueError):
        auroc([], [1])


def test_roc_and_tpr_at_fpr() -> None:
    pos = [0.9, 0.8, 0.7, 0.05]
    neg = [0.85] + [0.1] * 99  # one negative scores high: 1 % FPR
    fpr, tpr, thr = roc_curve(pos, neg)
    assert thr[0] == np.inf and fpr[0] == 0 and tpr[0] == 0 and fpr[-1] == 1 and tpr[-1] == 1
    # At most 1 % FPR allows the one high negative: threshold 0.7 -> TPR 3/4.
    assert tpr_at_fpr(pos, neg, 0.01) == 0.75
    # With no false positive allowed, only 0.9 is above the negative 0.85.
    assert tpr_at_fpr(pos, neg, 0.0) == 0.25


# -- size channel and padded frames -----------------------------------------------------------------


def test_size_channel_hand_values() -> None:
    full = size_channel([10, 10, 12, 12], [0, 0, 1, 1])
    assert full.mutual_information_bits == pytest.approx(1.0) and full.accuracy == 1.0 and full.baseline == 0.5
    none = size_channel([10, 10, 10, 10], [0, 1, 0, 1])
    assert none.mutual_information_bits == 0.0 and none.accuracy == 0.5 and none.distinct_sizes == 1
    # Half the rounds give it away: sizes {10: (0,0), 11: (0,1)} -> I = 1 - 0.5 * 1 - ... hand: 0.311 bits.
    half = size_channel([10, 10, 11, 11], [0, 0, 0, 1])
    h_y = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert half.mutual_information_bits == pytest.approx(h_y - 0.5 * 1.0)
    assert half.accuracy == 0.75
    with pytest.raises(ValueError):
        size_channel([1], [])


def test_current_round_frames_vary_in_size() -> None:
    """The size channel exists today: draft length and ID magnitude change the frame size."""
    sizes = {
        len(wire.encode_round(3, [], [5, 6, 7, 8])),
        len(wire.encode_round(3, [], [5, 6])),
        len(wire.encode_round(3, [], [40000, 6, 7, 8])),
        len(wire.encode_round(3, [12], [5, 6, 7, 8])),
    }
    assert len(sizes) == 4
