"""A ledger the accountants cannot compute is one `LedgerError` sentence, and δ must be in (0, 1).

Before: `privacy budget` on a ledger of noise 1e-300 (RDP) raised ZeroDivisionError, PRV at noise
0.01 a RuntimeError, PRV over 10^8 steps a MemoryError (735 TiB), and δ = 5 read as ε 0.000.
"""

from __future__ import annotations

from typing import Any

import pytest

import specsteer.privacy.accounting
from specsteer.privacy.accounting import LedgerError, epsilon_of, parse_ledger


def _ledger(delta: float = 1e-5, accountant: str = "rdp", history: Any = ((1.0, 0.5, 10),)) -> dict[str, Any]:
    return {
        "format": 1, "epsilon_budget": 8, "delta": delta, "epsilon_spent": 0, "rounds": [], "refusals": 0,
        "accountant": accountant, "history": [list(h) for h in history],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("ledger", "why"),
    [
        (_ledger(delta=5), "delta is 5"),
        (_ledger(delta=1), "delta is 1"),
        (_ledger(delta=0), "delta is 0"),
        (_ledger(history=[(1e-300, 0.5, 1)]), "noise multiplier"),
        (_ledger(accountant="prv", history=[(0.01, 0.5, 1)]), "noise multiplier"),
        (_ledger(accountant="prv", history=[(1.0, 0.5, 10**8)]), "step count"),
        (_ledger(history=[(1.0, 0.01, 1e300)]), "step count"),
        (_ledger(history=[(1.0, 0.5, 10**6)] * 2), "more than 1000000"),
    ],
    ids=["delta-5", "delta-1", "delta-0", "rdp-noise", "prv-noise", "prv-steps", "steps-1e300", "total-steps"],
)
def test_a_ledger_no_accountant_can_compute_is_damaged(ledger: dict[str, Any], why: str) -> None:
    with pytest.raises(LedgerError, match=why):
        parse_ledger(ledger, "x")


def test_epsilon_of_refuses_what_it_cannot_compute_in_one_sentence() -> None:
    with pytest.raises(LedgerError, match="noise multiplier below"):
        epsilon_of([(1e-300, 0.5, 1)], 1e-5, "rdp")
    with pytest.raises(LedgerError, match="strictly between 0 and 1"):
        epsilon_of([(1.0, 0.5, 1)], 5, "rdp")


def test_an_accountant_failure_is_a_ledger_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any) -> float:
        raise MemoryError("Unable to allocate 735. TiB")

    monkeypatch.setattr(specsteer.privacy.accounting, "_epsilon_cached", failing)
    with pytest.raises(LedgerError, match="prv accountant cannot compute"):
        epsilon_of([(1.0, 0.5, 10)], 1e-5, "prv")
