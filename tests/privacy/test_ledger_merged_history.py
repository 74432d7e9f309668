"""ε of a history whose entries repeat one (σ, q) is that of the merged history, for both accountants.

Before: one [σ, q, steps] entry a round, never merged, made Opacus's PRV accountant take 208 s for
200 rounds (5.3 s merged, the same ε). Composing n steps of one mechanism, then m more, is n + m
steps of it, so merging is exact; these compare against Opacus's own accountants on the raw history.
"""

from __future__ import annotations

import pytest
from opacus import accountants

import specsteer.privacy.accounting
from specsteer.privacy.accounting import epsilon_of

ROUNDS = [(1.0, 0.05, 20), (1.2, 0.1, 8), (1.0, 0.05, 20), (1.0, 0.05, 0), (1.2, 0.1, 8), (1.0, 0.05, 20)]
MERGED = [(1.0, 0.05, 60), (1.2, 0.1, 16)]


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_a_history_of_repeated_rounds_gives_the_merged_histories_epsilon(accountant: str) -> None:
    opacus = accountants.PRVAccountant() if accountant == "prv" else accountants.RDPAccountant()
    opacus.history = [h for h in ROUNDS if h[2]]
    raw = float(opacus.get_epsilon(delta=1e-5))
    assert epsilon_of(ROUNDS, 1e-5, accountant) == epsilon_of(MERGED, 1e-5, accountant)
    assert epsilon_of(ROUNDS, 1e-5, accountant) == pytest.approx(raw, rel=1e-3)
    assert epsilon_of(list(reversed(ROUNDS)), 1e-5, accountant) == epsilon_of(MERGED, 1e-5, accountant)


def test_the_accountant_sees_one_entry_per_mechanism(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[tuple[float, float, int], ...]] = []
    monkeypatch.setattr(
        specsteer.privacy.accounting, "_epsilon_cached", lambda history, delta, accountant: seen.append(history) or 1.0
    )
    epsilon_of([(1.0, 0.05, 20)] * 200 + [(1.2, 0.1, 1)] * 3, 1e-5, "prv")
    assert seen == [((1.0, 0.05, 4000), (1.2, 0.1, 3))]
