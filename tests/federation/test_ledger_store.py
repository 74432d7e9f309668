"""The ε ledger and the versioned adapter store, without Flower."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from opacus.accountants import PRVAccountant, RDPAccountant

from specsteer.federation.adapters import AdapterError, write_adapter
from specsteer.federation.budget_ledger import BudgetExhausted, Ledger, LedgerError, epsilon_of
from specsteer.federation.store import AdapterStore, load_global_adapter

HISTORY = [(1.0, 0.1, 5), (1.2, 0.05, 7)]


@pytest.mark.parametrize("accountant, cls", [("rdp", RDPAccountant), ("prv", PRVAccountant)])
def test_epsilon_matches_opacus_accountants(accountant: str, cls: type) -> None:
    reference = cls()
    reference.history = list(HISTORY)
    assert epsilon_of(HISTORY, 1e-5, accountant) == pytest.approx(reference.get_epsilon(delta=1e-5), rel=1e-9)
    assert epsilon_of([], 1e-5, accountant) == 0.0


def test_ledger_persists_and_refuses_once_spent(tmp_path: Path) -> None:
    path = tmp_path / "dev" / "ledger.json"
    budget = epsilon_of([(1.0, 0.1, 10)], 1e-5) * 1.01  # room for exactly one round of 10 steps
    ledger = Ledger.load(path, epsilon_budget=budget, delta=1e-5)
    assert ledger.epsilon_spent == 0.0 and not path.exists()
    projected = ledger.check(1.0, 0.1, 10)
    entry = ledger.record(run_id=7, server_round=1, adapter_version_in=0, history=[(1.0, 0.1, 10)], max_grad_norm=1.0)
    assert entry.epsilon_after == pytest.approx(projected)

    again = Ledger.load(path, epsilon_budget=budget, delta=1e-5)  # a restarted device
    assert again.history == [(1.0, 0.1, 10)] and again.rounds[0].run_id == 7
    assert again.epsilon_spent == pytest.approx(entry.epsilon_after)
    with pytest.raises(BudgetExhausted, match="Privacy budget exhausted"):
        again.check(1.0, 0.1, 10)
    assert Ledger.load(path, epsilon_budget=budget, delta=1e-5).refusals == 1
    # No temporary files left; the lock file is what serializes writers.
    assert sorted(p.name for p in path.parent.iterdir()) == ["ledger.json", "ledger.json.lock"]
    saved = json.loads(path.read_text())
    assert saved["accountant"] == "rdp" and saved["delta"] == 1e-5


def test_damaged_ledger_stops_training_instead_of_resetting(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"format": 1, "history": [[1.0, 0.1')
    with pytest.raises(LedgerError, match="damaged"):
        Ledger.load(path, epsilon_budget=8.0, delta=1e-5)


@pytest.mark.parametrize(
    "entry",
    [[1.0, 0.5, -19], [1.0, 1.5, 3], [float("nan"), 0.5, 3], [0.0, 0.5, 3], [1.0, 0.5, 2.5]],
    ids=["negative-steps", "rate-above-1", "nan-noise", "zero-noise", "half-a-step"],
)
def test_a_history_entry_the_accountant_cannot_take_is_damage(tmp_path: Path, entry: list[float]) -> None:
    """Negative steps gave budget back, a NaN hung the accountant, a rate above 1 crashed it."""
    path = tmp_path / "ledger.json"
    Ledger.load(path, epsilon_budget=8.0, delta=1e-5).save()
    data = json.loads(path.read_text())
    data["history"] = [[1.0, 0.5, 3], entry]
    path.write_text(json.dumps(data))
    with pytest.raises(LedgerError, match="damaged: a history entry"):
        Ledger.load(path, epsilon_budget=8.0, delta=1e-5)


@pytest.mark.parametrize(
    "budget, delta, accountant, message",
    [(0.0, 1e-5, "rdp", "budget"), (8.0, 1.0, "rdp", "δ"), (8.0, 1e-5, "gdp2", "accountant")],
)
def test_ledger_rejects_bad_settings(
    tmp_path: Path, budget: float, delta: float, accountant: str, message: str
) -> None:
    with pytest.raises(LedgerError, match=message):
        Ledger.load(tmp_path / "l.json", epsilon_budget=budget, delta=delta, accountant=accountant)


def _arrays(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layer.lora_A.weight": rng.normal(size=(2, 8)).astype(np.float32),
        "layer.lora_B.weight": rng.normal(size=(8, 2)).astype(np.float32),
    }


def test_store_versions_are_complete_immutable_and_checked(tmp_path: Path) -> None:
    store = AdapterStore(tmp_path / "adapters")
    assert store.latest() is None
    for v in (0, 1):
        store.save(v, _arrays(v), {"r": 2}, base="abc")
    (tmp_path / "adapters" / "v2").mkdir()  # an interrupted write: no manifest
    assert store.versions() == [0, 1] and store.latest() == 1
    np.testing.assert_array_equal(store.arrays(1)["layer.lora_A.weight"], _arrays(1)["layer.lora_A.weight"])

    with pytest.raises(AdapterError, match="already exists"):
        store.save(1, _arrays(5), {"r": 2}, base="abc")
    with pytest.raises(AdapterError, match=r"v7 is not in .*available: v0..v1"):
        load_global_adapter(7, tmp_path / "adapters")
    with pytest.raises(AdapterError, match="integer"):
        load_global_adapter(-1, tmp_path / "adapters")

    # A folder named v3 that holds v1 is a version mismatch, not silently v1.
    write_adapter(tmp_path / "adapters" / "v3", _arrays(1), {"r": 2}, kind="global", base="abc", version=1)
    with pytest.raises(AdapterError, match="mismatch"):
        load_global_adapter(3, tmp_path / "adapters")

    # Weights that no longer match their manifest are refused.
    weights = tmp_path / "adapters" / "v0" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\1")
    with pytest.raises(AdapterError, match="do not match"):
        load_global_adapter(0, tmp_path / "adapters")


def test_a_negative_prv_epsilon_is_recorded_as_zero_and_the_ledger_stays_readable(tmp_path: Path) -> None:
    """At δ = 0.2 Opacus's PRV accountant gives ε = -0.20 for two steps; the ledger saved it, and its
    own parser then refused the file as damaged: the device could never train again."""
    from specsteer.privacy.accounting import read_ledger_file

    history = [(1.0, 1 / 6, 2)]
    reference = PRVAccountant()
    reference.history = list(history)
    assert reference.get_epsilon(delta=0.2) < 0  # what the accountant says
    assert epsilon_of(history, 0.2, "prv") == 0.0  # (ε < 0, δ)-DP implies (0, δ)-DP
    path = tmp_path / "ledger.json"
    ledger = Ledger.load(path, epsilon_budget=8.0, delta=0.2, accountant="prv")
    entry = ledger.record(run_id=1, server_round=1, adapter_version_in=0, history=history, max_grad_norm=1.0)
    assert entry.epsilon_after == 0.0
    data = read_ledger_file(path)
    assert data is not None and data.history == history and data.epsilon_stored == 0.0
    assert Ledger.load(path, epsilon_budget=8.0, delta=0.2, accountant="prv").history == history
