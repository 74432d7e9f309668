"""Issue #50, finding 4: the work of a round does not depend on the size of the device's history.

A round of a device with 2 usable commits took 0.82-1.00 s and one with 36 took 1.52-1.75 s,
never overlapping: Opacus's Poisson batches hold about n·q = n/⌈n/b⌉ rows (2 against 4 at b = 4),
the personal batches min(b, n), and each batch ran only as wide as its longest sequence. Now every
DP step runs `step_rows(b)` rows and every personal step b rows, all `max-len` wide. The test
counts what goes through the model (rows and width of every forward pass, and the optimizer
steps), not the time: `bench/federation_round_time.py` measures the time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import specsteer.federation.participant
import specsteer.federation.task
from specsteer.core.errors import ConfigError
from specsteer.federation.participant import DevicePolicy, round_wait
from specsteer.federation.simulation import run_in_process
from tests.federation.conftest import FIXTURE_USERS, run_config

HOLDOUT = 4  # the device's min-holdout: the newest 4 entries are never trained on


def _history(folder: Path, usable: int) -> Path:
    users = [json.loads(line) for line in FIXTURE_USERS.read_text().splitlines() if line.strip()]
    entries = [e for u in users for e in u["profile"]]
    path = folder / f"history-{usable}.json"
    path.write_text(json.dumps({"user_id": f"user-{usable}", "profile": entries[: usable + HOLDOUT]}))
    return path


def _forward_passes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Spy on every training forward pass: (rows, width) of what goes through the model."""
    seen: list[tuple[int, int]] = []
    real = specsteer.federation.task.per_sequence_loss

    def spy(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        width = int(attention.sum(dim=1).max().item()) if attention.numel() else 0
        seen.append((int(ids.shape[0]), width))
        return real(model, ids, attention, target)

    monkeypatch.setattr(specsteer.federation.task, "per_sequence_loss", spy)
    return seen


def _round(model: Path, folder: Path, usable: int, quantum: float = 0.0) -> dict[str, Any]:
    state = folder / f"n{usable}"
    config = run_config(
        model, state, **{"dp-steps": 4, "personal-steps": 2, "min-clients": 1, "fraction-evaluate": 0.0}
    )
    node = {
        "data-file": str(_history(folder, usable)),
        "state-dir": str(state / "device"),
        "epsilon-budget": 8,
        "model": str(model),
        "max-sample-rate": 1,
        "max-epsilon-per-round": 8,
        "round-time-quantum": quantum,
    }
    run_in_process(config, [node])
    (event,) = [e for e in map(json.loads, (state / "device" / "rounds.jsonl").read_text().splitlines())]
    return dict(event)


def test_two_and_thirty_six_commits_cost_the_same_forward_passes(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes = _forward_passes(monkeypatch)
    work: dict[int, list[tuple[int, int]]] = {}
    events: dict[int, dict[str, Any]] = {}
    for usable in (2, 36):
        passes.clear()
        events[usable] = _round(tiny_bpe_model, tmp_path, usable)
        work[usable] = list(passes)
    assert events[2]["examples"] == 2 and events[36]["examples"] == 36
    # Both trained privately (at q = 1 and q = 1/9), and both ran 2 personal and 4 DP steps.
    assert events[2]["dp_steps"] >= 1 and events[36]["dp_steps"] >= 1
    assert len(work[2]) == len(work[36]) == 2 + 4
    # The same rows and width through the model at every step: 4 personal rows, 12 DP rows, max-len wide.
    assert work[2] == work[36] == [(4, 256)] * 2 + [(12, 256)] * 4


@pytest.mark.parametrize(
    ("elapsed", "quantum", "wait"),
    [(0.3, 0.0, 0.0), (0.3, 2.0, 1.7), (2.0, 2.0, 0.0), (2.5, 2.0, 1.5), (0.0, 2.0, 2.0), (7.9, 4.0, 0.1)],
)
def test_a_round_replies_on_the_next_quantum(elapsed: float, quantum: float, wait: float) -> None:
    assert round_wait(elapsed, quantum) == pytest.approx(wait)


def test_the_round_time_quantum_holds_the_reply_and_is_checked(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The time a round takes beyond its work (the accountant's projection, building the datasets)
    # still grew with the history; with a quantum the reply leaves only on one of its multiples.
    waits: list[float] = []
    real_sleep = specsteer.federation.participant.time.sleep
    monkeypatch.setattr(specsteer.federation.participant.time, "sleep", lambda s: (waits.append(s), real_sleep(s)))
    started = time.monotonic()
    _round(tiny_bpe_model, tmp_path, 2, quantum=1.5)
    assert len(waits) == 1 and 0 < waits[0] <= 1.5
    assert time.monotonic() - started >= 1.5
    for bad, why in ((-1, "round-time-quantum"), (1e9, "round-time-quantum"), ("soon", "not a number")):
        with pytest.raises(ConfigError, match=why):
            DevicePolicy.from_node_config({"round-time-quantum": bad})
