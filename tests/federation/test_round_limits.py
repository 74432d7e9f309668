"""Issue #50 finding 3: a run could spend a device's lifetime budget in one round.

Inside the device's policy, ``dp-steps 10000`` took 23 private steps and spent ε 7.96 of 8 in a
single round, and ``batch-size 64`` over 21 commits trained at sampling rate 1 (two steps cost
ε 7.08 where rate 1/6 costs 3.14). The device now bounds both: ``max-epsilon-per-round``
(default: the budget / 2) trims the private steps, with the ledger's own accountant, and
``max-sample-rate`` (default 0.5) takes none at a larger rate. Either way the device answers as
usual (cover steps), and its ledger shows at most the per-round ε.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Message

from specsteer.core.errors import ConfigError
from specsteer.federation.budget_ledger import Ledger
from specsteer.federation.participant import DEFAULT_EPSILON_BUDGET, DevicePolicy
from specsteer.federation.task import dp_sample_rate
from specsteer.privacy.accounting import epsilon_of, read_ledger_file
from tests.federation.conftest import deliver, node_configs, run_config, train_content, v0_arrays


def _round(model: Path, state: Path, node: dict[str, Any] | None = None, **overrides: Any) -> Message:
    (config_node,) = node_configs(model, state, 1, **(node or {}))
    arrays, _ = v0_arrays(run_config(model, state))
    return deliver(train_content(arrays), "train", config_node, run_config(model, state, **overrides))


def _train_record(state: Path) -> dict[str, Any]:
    log = [json.loads(line) for line in (state / "device0" / "rounds.jsonl").read_text().splitlines()]
    (record,) = [r for r in log if r["event"] == "train"]
    return record


# The device's max-dp-steps, lowered from 64 so that the cover steps (every proposed step runs,
# padded to step_rows rows) stay cheap; still far above the steps the ε per round affords.
MAX_DP_STEPS = 8


def test_a_huge_dp_steps_proposal_is_trimmed_to_the_epsilon_per_round(tiny_bpe_model: Path, tmp_path: Path) -> None:
    reply = _round(tiny_bpe_model, tmp_path, {"max-dp-steps": MAX_DP_STEPS}, **{"dp-steps": 10000})
    assert not reply.has_error()
    ledger = read_ledger_file(tmp_path / "device0" / "ledger.json")
    assert ledger is not None
    cap = DEFAULT_EPSILON_BUDGET / 2
    (entry,) = ledger.rounds
    assert 0 < entry["epsilon_after"] <= cap  # was 7.96 of 8 in this one round
    # Trimmed, not refused: the most steps within the cap, by the ledger's own accountant.
    rate = dp_sample_rate(21, 4)
    steps = entry["steps"]
    assert 1 <= steps < MAX_DP_STEPS and epsilon_of([(1.0, rate, steps + 1)], 1e-5) > cap
    record = _train_record(tmp_path)
    assert record["dp_steps"] == steps and record["cover_steps"] == MAX_DP_STEPS - steps  # max-dp-steps in all


def test_the_epsilon_per_round_is_the_devices_to_set(tiny_bpe_model: Path, tmp_path: Path) -> None:
    # A cap below one step's ε buys no private step: cover steps only, the round counted as sat out.
    node = {"max-epsilon-per-round": 1.0, "max-dp-steps": MAX_DP_STEPS}
    reply = _round(tiny_bpe_model, tmp_path, node, **{"dp-steps": 10000})
    assert not reply.has_error()
    ledger = read_ledger_file(tmp_path / "device0" / "ledger.json")
    assert ledger is not None and ledger.history == [] and ledger.refusals == 1


def test_batch_size_64_takes_no_private_step_by_default(tiny_bpe_model: Path, tmp_path: Path) -> None:
    reply = _round(tiny_bpe_model, tmp_path, **{"batch-size": 64})  # 21 commits: sampling rate 1
    assert not reply.has_error()  # the same answer as any round: nothing tells the server why
    ledger = read_ledger_file(tmp_path / "device0" / "ledger.json")
    assert ledger is not None and ledger.history == [] and ledger.refusals == 1
    assert _train_record(tmp_path)["dp_steps"] == 0


def test_each_round_adds_at_most_the_cap_and_the_budget_lasts(tmp_path: Path) -> None:
    ledger = Ledger.load(tmp_path / "ledger.json", epsilon_budget=8.0, delta=1e-5)
    cap = DevicePolicy().round_epsilon_cap(ledger.epsilon_budget)
    rounds = 0
    while (steps := ledger.affordable_steps(1.0, 1 / 6, 64, per_round=cap)) > 0:
        before = ledger.epsilon_spent
        ledger.record(
            run_id=1, server_round=rounds, adapter_version_in=0, history=[(1.0, 1 / 6, steps)], max_grad_norm=1
        )
        assert ledger.epsilon_spent - before <= cap
        rounds += 1
    assert rounds >= 2 and ledger.epsilon_spent <= 8.0


@pytest.mark.parametrize("value", [0, -1, "nan", "inf"])
def test_the_epsilon_per_round_must_be_a_positive_number(value: Any) -> None:
    with pytest.raises(ConfigError):
        DevicePolicy.from_node_config({"max-epsilon-per-round": value})
