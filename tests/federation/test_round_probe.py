"""Issue 30 #3: a server probing with dp-steps learns nothing about the size of a device's history.

The server proposes a round; each device decides its own DP steps from its policy and history.
Through the real ServerApp and ClientApps (`run_in_process`), devices with 8, 12, 20 and 36
history entries and fresh ledgers (budget 8, noise 1) must look the same to the server for every
proposal: accept or refuse, the reply's records, array keys, shapes and dtypes, and its metrics.
Before this, the largest proposal a device accepted grew with its history (2 / 4 / 8 / 32 steps).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message

import specsteer.federation.task
from specsteer.federation.budget_ledger import Ledger, epsilon_of
from specsteer.federation.simulation import LocalGrid, run_in_process
from tests.federation.conftest import FIXTURE_USERS, run_config

SIZES = (8, 12, 20, 36)


def _histories(folder: Path) -> list[Path]:
    users = [json.loads(line) for line in FIXTURE_USERS.read_text().splitlines() if line.strip()]
    entries = [e for u in users for e in u["profile"]]
    assert len(entries) >= max(SIZES)
    paths = []
    for n in SIZES:
        path = folder / f"history-{n}.json"
        path.write_text(json.dumps({"user_id": f"user-{n}", "profile": entries[:n]}))
        paths.append(path)
    return paths


def _nodes(model: Path, histories: list[Path], state: Path, **policy: Any) -> list[dict[str, Any]]:
    # Any sampling rate and the whole budget in one round: what each size affords is the subject
    # here (the device's per-round limits, which bound it further, are test_round_limits's).
    limits = {"max-sample-rate": 1, "max-epsilon-per-round": 8}
    return [
        {
            "data-file": str(h),
            "state-dir": str(state / f"n{n}"),
            "epsilon-budget": 8,
            "model": str(model),
            **limits,
            **policy,
        }
        for n, h in zip(SIZES, histories, strict=True)
    ]


def _observed(reply: Message | None) -> tuple[Any, ...]:
    """Everything the server sees of a train reply except the values of the DP-protected arrays."""
    assert reply is not None
    if reply.has_error():
        return ("refused", reply.error.code, reply.error.reason)
    content = reply.content
    arrays = tuple(
        (name, tuple((k, tuple(a.shape), a.dtype) for k, a in record.items()))
        for name, record in content.array_records.items()
    )
    metrics = tuple((name, tuple(sorted(record.items()))) for name, record in content.metric_records.items())
    configs = tuple((name, tuple(sorted(record.items()))) for name, record in content.config_records.items())
    return ("replied", arrays, metrics, configs)


def _by_size(grid: LocalGrid) -> dict[int, tuple[Any, ...]]:
    trains = [d for d in grid.deliveries if d.message.metadata.message_type == "train"]
    return {SIZES[d.message.metadata.dst_node_id - 1000]: _observed(d.reply) for d in trains}


def _steps(state: Path, n: int) -> int:
    return sum(int(h[2]) for h in json.loads((state / f"n{n}" / "ledger.json").read_text())["history"])


def _config(model: Path, state: Path, steps: int) -> dict[str, Any]:
    return run_config(
        model, state, **{"dp-steps": steps, "personal-steps": 1, "min-clients": len(SIZES), "fraction-evaluate": 0.0}
    )


@pytest.mark.parametrize("proposed", [2, 8, 32])
def test_every_history_size_answers_every_proposal_alike(tiny_bpe_model: Path, tmp_path: Path, proposed: int) -> None:
    state = tmp_path / f"proposed-{proposed}"
    _, grid = run_in_process(
        _config(tiny_bpe_model, state, proposed), _nodes(tiny_bpe_model, _histories(tmp_path), state)
    )
    seen = _by_size(grid)
    assert sorted(seen) == list(SIZES)
    assert len(set(seen.values())) == 1, seen  # identical for 8, 12, 20 and 36 entries
    (only,) = set(seen.values())
    assert only[0] == "replied"
    assert only[2] == (("metrics", (("weight", 1),)),)  # no step count, no ε

    # Each device did decide for itself: the small histories trained fewer steps than proposed.
    steps = {n: _steps(state, n) for n in SIZES}
    assert all(1 <= s <= proposed for s in steps.values())
    if proposed == 32:
        assert steps[8] < steps[36] == 32
    for n, s in steps.items():
        ledger = Ledger.load(state / f"n{n}" / "ledger.json", epsilon_budget=8, delta=1e-5)
        assert ledger.epsilon_spent <= 8 and ledger.refusals == 0
        # ...the most it could afford: one step more would have passed its budget.
        rate = ledger.history[0][1]
        assert s == proposed or epsilon_of([(1.0, rate, s + 1)], 1e-5, "rdp") > 8


def _batches_through_the_model(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on every training batch (Poisson sampling may draw an empty one): their sizes, in order."""
    sizes: list[int] = []
    real = specsteer.federation.task._cycle

    def counting(loader: Any, steps: int) -> Iterator[Any]:
        for batch in real(loader, steps):
            sizes.append(int(batch[0].shape[0]))
            yield batch

    monkeypatch.setattr(specsteer.federation.task, "_cycle", counting)
    return sizes


def _train_events(state: Path, n: int) -> list[dict[str, Any]]:
    log = state / f"n{n}" / "rounds.jsonl"
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "train"]


def test_every_history_size_costs_the_same_work(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timing: each device runs every proposed step through the model, afforded or not."""
    sizes = _batches_through_the_model(monkeypatch)
    state = tmp_path / "work"
    proposed = 32
    run_in_process(_config(tiny_bpe_model, state, proposed), _nodes(tiny_bpe_model, _histories(tmp_path), state))
    events = {n: _train_events(state, n) for n in SIZES}
    assert all(len(e) == 1 for e in events.values())
    # The 8-entry device affords fewer steps than the 36-entry one, and covers the rest.
    assert events[8][0]["dp_steps"] < events[36][0]["dp_steps"] == proposed
    assert {e[0]["dp_steps"] + e[0]["cover_steps"] for e in events.values()} == {proposed}
    # 32 DP-phase batches per device, whatever the history; the expected batch is the
    # configured one at every size (Poisson sampling at rate batch/n), so the work matches too.
    assert len(sizes) == len(SIZES) * proposed
    assert 2 <= sum(sizes) / len(sizes) <= 6


def test_a_device_that_can_afford_nothing_answers_and_works_alike_and_spends_nothing(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    histories = _histories(tmp_path)
    trained_state = tmp_path / "trained"
    _, trained = run_in_process(
        _config(tiny_bpe_model, trained_state, 2), _nodes(tiny_bpe_model, histories, trained_state)
    )
    trained_shape = set(_by_size(trained).values())

    sizes = _batches_through_the_model(monkeypatch)
    state = tmp_path / "poor"  # budgets too small for a single step at any size
    summary, grid = run_in_process(
        _config(tiny_bpe_model, state, 2), _nodes(tiny_bpe_model, histories, state, **{"epsilon-budget": 0.01})
    )
    seen = _by_size(grid)
    assert set(seen.values()) == trained_shape  # the same one observation as the devices that trained
    assert summary["rounds"][0]["refusals"] == [] and summary["rounds"][0]["replies"] == len(SIZES)
    assert len(sizes) == len(SIZES) * 2  # the same work as a device that trains
    # What they sent back is a noise-only update, as large as a trained one: no zero update to spot.
    sent = next(d.message for d in grid.deliveries).content.array_records["arrays"]
    for d in grid.deliveries:
        assert d.reply is not None
        got = d.reply.content.array_records["arrays"]
        assert not all(np.array_equal(got[k].numpy(), sent[k].numpy()) for k in sent)
    for n in SIZES:
        ledger = Ledger.load(state / f"n{n}" / "ledger.json", epsilon_budget=0.01, delta=1e-5)
        assert ledger.history == [] and ledger.refusals == 1
        (event,) = _train_events(state, n)
        assert event["dp_steps"] == 0 and event["cover_steps"] == 2 and event["epsilon"] == 0.0
