"""Through real runs: the device's DP policy, commit-level sequences, nothing sent in the clear.

Every run here is the project's real ServerApp and ClientApps (`run_in_process`), with real
Opacus where a device trains. Refusals happen before the model is loaded, so they cost little.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specsteer.core.models import load_causal_lm
from specsteer.federation.client_app import UNAVAILABLE
from specsteer.federation.participant import Device
from specsteer.federation.simulation import run_in_process
from specsteer.federation.task import SpecialistWithAdapters, TaskConfig, device_datasets, load_user, split_profile
from tests.federation.conftest import FIXTURE_USERS, node_configs, run_config


def _refusals(summary: dict[str, Any]) -> list[str]:
    (only,) = summary["rounds"]
    assert only["replies"] == 0 and only["version_out"] is None, only
    return only["refusals"]


def _causes(state: Path) -> list[str]:
    """The causes of the refusals a device logged (its own log; JSON escapes δ)."""
    lines = (state / "rounds.jsonl").read_text().splitlines()
    return [str(record.get("cause", "")) for record in map(json.loads, lines)]


LESS_PRIVACY = "Refused: the run asks for less privacy than this device's policy allows."


@pytest.mark.parametrize(
    ("overrides", "node", "detail"),
    [
        ({"dp": False}, {}, "Refused: this device trains only with differential privacy; the run asks for none."),
        (
            {"noise-multiplier": 0.5},
            {"min-noise-multiplier": 0.8},
            "Refused: the run's noise multiplier 0.5 is below this device's minimum of 0.8.",
        ),
        ({"delta": 0.5}, {}, "Refused: the run asks for δ=0.5; this device's δ is fixed at 1e-05."),
    ],
)
def test_a_run_asking_for_less_privacy_is_refused(
    tiny_bpe_model: Path, tmp_path: Path, overrides: dict[str, Any], node: dict[str, Any], detail: str
) -> None:
    config = run_config(tiny_bpe_model, tmp_path, **overrides)
    summary, grid = run_in_process(config, node_configs(tiny_bpe_model, tmp_path, **node))
    # The server reads one fixed sentence; the figures are in the device's own log.
    assert _refusals(summary) == [LESS_PRIVACY, LESS_PRIVACY]
    for i in range(2):
        # Refused before anything was trained or spent: no ledger, no personal adapter.
        assert not (tmp_path / f"device{i}" / "ledger.json").exists()
        assert not (tmp_path / f"device{i}" / "personal").exists()
        assert any(detail in cause for cause in _causes(tmp_path / f"device{i}"))
    trains = [d for d in grid.deliveries if d.message.metadata.message_type == "train"]
    assert len(trains) == 2 and all(d.reply is not None and d.reply.has_error() for d in trains)


def test_refusals_do_not_tell_devices_apart_by_their_terms(tiny_bpe_model: Path, tmp_path: Path) -> None:
    """The refusal sentences echoed each device's minimum noise multiplier, its δ and the flag that
    was off: a server could tell devices apart (and follow one across runs) by them."""
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"idle": False, "charging": True, "unmetered": True}))
    nodes = node_configs(tiny_bpe_model, tmp_path, 3)
    nodes[0]["min-noise-multiplier"] = 0.8
    nodes[1]["min-noise-multiplier"] = 0.9
    nodes[2]["delta"] = 1e-6
    summary, grid = run_in_process(run_config(tiny_bpe_model, tmp_path, **{"noise-multiplier": 0.5}), nodes)
    assert _refusals(summary) == [LESS_PRIVACY] * 3
    nodes = node_configs(tiny_bpe_model, tmp_path, 2, **{"eligibility-file": str(status)})
    nodes[1]["eligibility-file"] = str(tmp_path / "missing.json")  # unreadable: no flag is set
    summary, grid = run_in_process(run_config(tiny_bpe_model, tmp_path), nodes)
    assert _refusals(summary) == ["Device not eligible for this round."] * 2
    sent = b"".join(b for d in grid.deliveries for b in d.sent_bytes)
    for detail in (b"0.8", b"0.9", b"1e-06", b"idle", b"charging", b"unmetered"):
        assert detail not in sent, detail
    assert any("not idle" in cause for cause in _causes(tmp_path / "device0"))


def test_a_run_cannot_waive_the_devices_eligibility(tiny_bpe_model: Path, tmp_path: Path) -> None:
    """A run config of require-idle/-charging/-unmetered = false trained a device that was on
    battery, busy and metered: the server, not the device, decided when it may spend its battery,
    its data plan and its budget. The run may now only add to the device's own requirements."""
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"idle": False, "charging": False, "unmetered": False}))
    nodes = node_configs(tiny_bpe_model, tmp_path, **{"eligibility-file": str(status)})
    waiving = {f"require-{flag}": False for flag in ("idle", "charging", "unmetered")}
    summary, _ = run_in_process(run_config(tiny_bpe_model, tmp_path, **waiving), nodes)
    assert _refusals(summary) == ["Device not eligible for this round."] * 2
    for i in range(2):
        assert not (tmp_path / f"device{i}" / "ledger.json").exists()  # nothing read, nothing spent
        assert any("not idle, not charging, not unmetered" in c for c in _causes(tmp_path / f"device{i}"))

    # The device's operator may waive its own flags; a run may still require them.
    status.write_text(json.dumps({"idle": True, "charging": False, "unmetered": True}))
    own = node_configs(tiny_bpe_model, tmp_path, **{"eligibility-file": str(status), "require-charging": False})
    summary, _ = run_in_process(run_config(tiny_bpe_model, tmp_path), own)
    assert _refusals(summary) == ["Device not eligible for this round."] * 2  # the run requires charging
    config = run_config(tiny_bpe_model, tmp_path, **{"require-charging": False, "dp-steps": 1, "personal-steps": 1})
    summary, _ = run_in_process(config, own)
    assert summary["rounds"][0]["replies"] == 2


def test_the_policy_is_fixed_when_the_ledger_is_created(tiny_bpe_model: Path, tmp_path: Path) -> None:
    config = run_config(tiny_bpe_model, tmp_path, **{"dp-steps": 1, "personal-steps": 1})
    first, _ = run_in_process(config, node_configs(tiny_bpe_model, tmp_path, **{"epsilon-budget": 5}))
    assert first["rounds"][0]["replies"] == 2
    ledger = json.loads((tmp_path / "device0" / "ledger.json").read_text())
    assert ledger["policy"] == {"dp_required": True, "min_noise_multiplier": 1.0} and ledger["epsilon_budget"] == 5

    # A node config that later loosens the policy (bigger budget, DP optional) does not loosen it.
    looser = node_configs(tiny_bpe_model, tmp_path, **{"epsilon-budget": 500, "dp-required": False})
    second, _ = run_in_process(run_config(tiny_bpe_model, tmp_path, dp=False), looser)
    assert _refusals(second) == [UNAVAILABLE, UNAVAILABLE]
    log = (tmp_path / "device0" / "rounds.jsonl").read_text()
    assert "DP policy is fixed by its ledger" in log  # the device's owner is told why
    assert json.loads((tmp_path / "device0" / "ledger.json").read_text())["epsilon_budget"] == 5


def test_refusal_reasons_carry_no_paths_ids_or_exception_text(tiny_bpe_model: Path, tmp_path: Path) -> None:
    missing = tmp_path / "alice-private" / "history.jsonl"
    nodes = [
        {"data-file": str(missing), "partition-id": 0, "state-dir": str(tmp_path / "d0"), "model": str(tiny_bpe_model)},
        {
            "data-file": str(FIXTURE_USERS),
            "user-id": "jane.doe@example.com",
            "state-dir": str(tmp_path / "d1"),
            "model": str(tiny_bpe_model),
        },
    ]
    summary, grid = run_in_process(run_config(tiny_bpe_model, tmp_path), nodes)
    assert _refusals(summary) == [UNAVAILABLE, UNAVAILABLE]
    sent = b"".join(b for d in grid.deliveries for b in d.sent_bytes)
    for secret in (str(missing), "alice-private", "jane.doe@example.com", "users.jsonl", "Error"):
        assert secret.encode() not in sent, secret
    # The causes are in each device's own log.
    assert "alice-private" in (tmp_path / "d0" / "rounds.jsonl").read_text()
    assert "jane.doe@example.com" in (tmp_path / "d1" / "rounds.jsonl").read_text()


def test_no_epsilon_and_no_losses_leave_the_device(tiny_bpe_model: Path, tmp_path: Path) -> None:
    # Even a run that asks for the held-out losses (the old share-eval-metrics) gets none.
    config = run_config(tiny_bpe_model, tmp_path, **{"dp-steps": 1, "personal-steps": 1, "share-eval-metrics": True})
    summary, grid = run_in_process(config, node_configs(tiny_bpe_model, tmp_path))
    assert summary["version_out"] == 1
    for d in grid.deliveries:
        assert d.reply is not None and not d.reply.has_error()
        metrics = d.reply.content.metric_records["metrics"]
        assert set(metrics) == {"weight"}
    assert not summary["rounds"][0]["eval_metrics"].keys() - {"weight"}
    # They are on the device, in its own log.
    records = [json.loads(line) for line in (tmp_path / "device0" / "rounds.jsonl").read_text().splitlines()]
    assert any("loss-personal" in r for r in records) and any(r.get("epsilon") for r in records)


def test_dp_sequences_hold_exactly_one_commit(tiny_chat_model: Path) -> None:
    # The settings of test_task, where most personal sequences do carry retrieved context.
    cfg = TaskConfig(max_len=320, context_chars=300, lora_rank=2, lora_targets="q_proj")
    sw = SpecialistWithAdapters(load_causal_lm(str(tiny_chat_model), progress=False), cfg)
    data = load_user(FIXTURE_USERS, index=0)
    train, _ = split_profile(data.profile, cfg.holdout)
    sets = device_datasets(sw, data, cfg)
    dp = sets.dp_train if hasattr(sets, "dp_train") else sets[0]
    assert len(dp) == len(train)
    ids, attention, _ = dp[:]
    for i, entry in enumerate(train):
        text = sw.lm.tokenizer.decode(ids[i][attention[i].bool()].tolist())
        others = [e for e in train if e is not entry and e.subject not in entry.subject]
        # No other commit of the history (its subject line) is inside this commit's DP sequence.
        assert not [e.subject for e in others if f"Subject: {e.subject}" in text], text[:300]
    # The personal adapter keeps the inference format, with retrieved context.
    if hasattr(sets, "personal_train"):
        pids, pattn, _ = sets.personal_train[:]
        texts = [sw.lm.tokenizer.decode(pids[i][pattn[i].bool()].tolist()) for i in range(len(train))]
        assert sum(t.count("Subject: ") > 1 for t in texts) > len(train) // 2


def test_the_device_bounds_the_work_a_run_asks_of_it(tmp_path: Path) -> None:
    """A run config set the device's memory and time: max-len 10^6 tripled its peak memory, and
    personal-steps had no bound (the ledger lock held all the while)."""
    node = {"data-file": str(FIXTURE_USERS), "state-dir": str(tmp_path / "d")}
    greedy = {"max-len": 10**6, "personal-steps": 10**4}
    cfg = Device.from_configs(node, greedy).cfg
    assert (cfg.max_len, cfg.personal_steps) == (1024, 64)
    cfg = Device.from_configs({**node, "max-len": 4096, "max-personal-steps": 500}, greedy).cfg
    assert (cfg.max_len, cfg.personal_steps) == (4096, 500)  # the device's own terms may be larger
    cfg = Device.from_configs(node, {"max-len": 256, "personal-steps": 2}).cfg
    assert (cfg.max_len, cfg.personal_steps) == (256, 2)  # a run asking less gets what it asks
