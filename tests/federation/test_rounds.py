"""End to end in one process: Flower's ServerApp and ClientApps, real Opacus DP-SGD, real peft.

Every test drives the project's real `federation.server_app.app` and `federation.client_app.app`
through `LocalGrid` (Flower's Grid interface, in memory) on tiny models and the 3-user fixture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

import specsteer.federation.participant
import specsteer.federation.task
from specsteer.federation.adapters import load_tensors, read_adapter
from specsteer.federation.budget_ledger import Ledger, epsilon_of
from specsteer.federation.client_app import UNAVAILABLE
from specsteer.federation.simulation import deflated_bytes, run_in_process
from specsteer.federation.store import AdapterStore
from specsteer.federation.task import dp_sample_rate
from tests.federation.conftest import node_configs, run_config


def _ledger(state: Path, i: int) -> dict[str, Any]:
    return json.loads((state / f"device{i}" / "ledger.json").read_text())


def _chunks(array: np.ndarray, floats: int = 8) -> list[bytes]:
    """32-byte windows of an array's raw float32 bytes, skipping all-zero windows."""
    raw = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)
    out = []
    for start in range(0, raw.size - floats + 1, floats):
        window = raw[start : start + floats]
        if np.any(window != 0):
            out.append(window.tobytes())
    return out


def test_dp_rounds_produce_versions_ledgers_and_device_copies(tiny_bpe_model: Path, tmp_path: Path) -> None:
    config = run_config(tiny_bpe_model, tmp_path, **{"num-server-rounds": 2})
    summary, grid = run_in_process(config, node_configs(tiny_bpe_model, tmp_path))

    assert summary["version_in"] == 0 and summary["version_out"] == 2
    assert [r["replies"] for r in summary["rounds"]] == [2, 2]
    assert all(not r["refusals"] for r in summary["rounds"])

    store = AdapterStore(tmp_path / "server" / "adapters")
    assert store.versions() == [0, 1, 2]
    v0, v1, v2 = (store.arrays(v) for v in (0, 1, 2))
    b_keys = [k for k in v0 if "lora_B" in k]
    assert b_keys and all(not v0[k].any() for k in b_keys)  # v0 is the base model exactly
    # The DP update reached the adapter (the Opacus "model.to() before peft" snag would leave it zero).
    assert all(np.abs(v1[k]).sum() > 0 for k in b_keys)
    assert sum(float(np.abs(v2[k] - v1[k]).sum()) for k in v1) > 0

    for i in range(2):
        ledger = _ledger(tmp_path, i)
        assert len(ledger["rounds"]) == 2
        assert [r["adapter_version_in"] for r in ledger["rounds"]] == [0, 1]
        rate = dp_sample_rate(21, 4)  # 25 fixture entries minus 4 held out, batches of 4
        assert ledger["history"] == [[1.0, rate, 2], [1.0, rate, 2]]
        expected = epsilon_of([(1.0, rate, 4)], 1e-5, "rdp")
        assert ledger["epsilon_spent"] == pytest.approx(expected, rel=1e-9)
        first, second = (r["epsilon_after"] for r in ledger["rounds"])
        assert 0 < first < second == pytest.approx(expected)
    # ε stays on the device: it depends on the history's size.
    assert all("epsilon" not in r["train_metrics"] for r in summary["rounds"])

    # The device kept the version it received after the last round, byte for byte the server's.
    for i in range(2):
        device_copy = read_adapter(tmp_path / f"device{i}" / "global" / "v2", kind="global", version=2)
        assert device_copy.manifest["sha256"] == store.get(2).manifest["sha256"]
        personal = read_adapter(tmp_path / f"device{i}" / "personal", kind="personal")
        assert personal.manifest["trained_on_global_version"] == 1
        assert any(np.abs(v).sum() > 0 for k, v in load_tensors(personal).items() if "lora_B" in k)

    kinds = sorted({d.message.metadata.message_type for d in grid.deliveries})
    assert kinds == ["evaluate", "train"]


def test_personal_adapter_bytes_never_leave_the_device(tiny_bpe_model: Path, tmp_path: Path) -> None:
    config = run_config(tiny_bpe_model, tmp_path, **{"num-server-rounds": 2})
    _, grid = run_in_process(config, node_configs(tiny_bpe_model, tmp_path))
    sent = b"".join(b for d in grid.deliveries for b in d.sent_bytes)
    assert sent  # the devices did send their global adapters

    for i in range(2):
        personal = load_tensors(read_adapter(tmp_path / f"device{i}" / "personal", kind="personal"))
        windows = [w for name, arr in personal.items() for w in _chunks(arr)]
        assert len(windows) > 10
        assert not any(w in sent for w in windows), "personal adapter weights appear in a device's messages"

        # The detector works: had the device put these arrays in a reply, Flower's serialized
        # objects would contain them verbatim.
        leak = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in personal.items()})})
        leaked = b"".join(deflated_bytes(leak))
        assert all(w in leaked for w in windows)

    # What each train reply carries: one ArrayRecord of global-adapter keys and one metric.
    for d in grid.deliveries:
        assert d.reply is not None and not d.reply.has_error()
        content = d.reply.content
        if d.message.metadata.message_type == "train":
            assert list(content.array_records) == ["arrays"]
            assert all(".global." not in k and ".personal." not in k for k in content["arrays"])
            assert set(content.metric_records["metrics"]) == {"weight"}  # ε and the steps stay on the device
        else:
            assert not content.array_records
            assert set(content.metric_records["metrics"]) == {"weight"}  # losses stay on the device


def test_dropouts_do_not_break_the_round(tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device 1 crashes inside DP training in round 1; device 2 vanishes (no reply) for round 1's train."""
    real = specsteer.federation.participant.train_global_dp

    def crash_device1(sw: Any, train_set: Any, cfg: Any, ledger: Ledger | None, **kwargs: Any) -> Any:
        if kwargs["server_round"] == 1 and ledger is not None and "device1" in str(ledger.path):
            raise RuntimeError("connection lost mid-training")
        return real(sw, train_set, cfg, ledger, **kwargs)

    monkeypatch.setattr(specsteer.federation.participant, "train_global_dp", crash_device1)

    def vanish_in_round_1(msg: Message) -> bool:
        return msg.metadata.message_type == "train" and msg.content["config"]["server-round"] == 1

    config = run_config(tiny_bpe_model, tmp_path, **{"num-server-rounds": 2, "min-clients": 1})
    summary, _ = run_in_process(config, node_configs(tiny_bpe_model, tmp_path, 3), dropouts={2: vanish_in_round_1})

    first, second = summary["rounds"]
    assert first["replies"] == 1 and first["version_out"] == 1
    # The crash is a refusal whose cause stays in the device's own log, not on the wire.
    assert first["refusals"] == [UNAVAILABLE]
    log = (tmp_path / "device1" / "rounds.jsonl").read_text()
    assert "RuntimeError: connection lost mid-training" in log
    assert second["replies"] == 3 and second["version_out"] == 2
    # Only completed DP rounds are charged: the crashed and the vanished device spent ε once.
    assert [len(_ledger(tmp_path, i)["rounds"]) for i in range(3)] == [2, 1, 1]


def test_restarted_server_resumes_versions_and_ledgers(tiny_bpe_model: Path, tmp_path: Path) -> None:
    config = run_config(tiny_bpe_model, tmp_path)
    nodes = node_configs(tiny_bpe_model, tmp_path)
    first, _ = run_in_process(config, nodes, run_id=11)
    specsteer.federation.task._MODELS.clear()  # a restarted process has no cached model
    second, _ = run_in_process(config, nodes, run_id=12)

    assert (first["version_in"], first["version_out"]) == (0, 1)
    assert (second["version_in"], second["version_out"]) == (1, 2)
    runs = (tmp_path / "server" / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in runs] == [11, 12]
    for i in range(2):
        rounds = _ledger(tmp_path, i)["rounds"]
        assert [(r["run_id"], r["adapter_version_in"]) for r in rounds] == [(11, 0), (12, 1)]


def test_budget_exhaustion_answers_with_cover_steps_and_spends_nothing(tiny_bpe_model: Path, tmp_path: Path) -> None:
    rate = dp_sample_rate(21, 4)
    one, two = epsilon_of([(1.0, rate, 2)], 1e-5), epsilon_of([(1.0, rate, 3)], 1e-5)
    budget = (one + two) / 2  # room for exactly one round of 2 steps, not a third step
    config = run_config(tiny_bpe_model, tmp_path, **{"num-server-rounds": 2})
    # The whole budget may go in one round here (the per-round cap is test_round_limits's subject).
    nodes = node_configs(tiny_bpe_model, tmp_path, **{"epsilon-budget": budget, "max-epsilon-per-round": budget})
    summary, grid = run_in_process(config, nodes)

    first, second = summary["rounds"]
    assert first["version_out"] == 1
    # A refusal, or a zero update, would tell the server the budget ran out, which depends on the
    # history's size: the devices answer as usual, with an update of noise alone.
    assert second["replies"] == 2 and second["refusals"] == []
    store = AdapterStore(tmp_path / "server" / "adapters")
    v1, v2 = store.arrays(1), store.arrays(2)
    assert not all(np.array_equal(v1[k], v2[k]) for k in v1)
    trains = [d for d in grid.deliveries if d.message.metadata.message_type == "train"]
    assert {tuple(d.reply.content["arrays"]) for d in trains if d.reply is not None} == {tuple(sorted(v1))}
    for i in range(2):
        ledger = Ledger.load(tmp_path / f"device{i}" / "ledger.json", epsilon_budget=budget, delta=1e-5)
        assert len(ledger.rounds) == 1 and ledger.refusals == 1
        assert ledger.epsilon_spent == pytest.approx(one) and ledger.epsilon_spent <= budget


def test_eligibility_flags_gate_participation(tiny_bpe_model: Path, tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"idle": True, "charging": False, "unmetered": True}))
    nodes = node_configs(tiny_bpe_model, tmp_path)
    nodes[1]["eligibility-file"] = str(status)
    config = run_config(tiny_bpe_model, tmp_path, **{"min-clients": 1})
    summary, _ = run_in_process(config, nodes)
    (only,) = summary["rounds"]
    # One fixed sentence: which flag is off would tell the server about the device's state.
    assert only["replies"] == 1 and only["refusals"] == ["Device not eligible for this round."]
    assert not (tmp_path / "device1" / "ledger.json").exists()  # nothing trained, nothing spent
    assert "not charging" in (tmp_path / "device1" / "rounds.jsonl").read_text()  # its owner is told

    # A device whose operator waived the flag (node config) takes part in a run that waives it too.
    nodes[1]["require-charging"] = False
    config["require-charging"] = False
    summary, _ = run_in_process(config, nodes)
    assert summary["rounds"][0]["replies"] == 2


def test_without_dp_no_budget_is_spent(tiny_bpe_model: Path, tmp_path: Path) -> None:
    config = run_config(tiny_bpe_model, tmp_path, dp=False)
    summary, grid = run_in_process(config, node_configs(tiny_bpe_model, tmp_path, **{"dp-required": False}))
    assert summary["version_out"] == 1
    assert not (tmp_path / "device0" / "ledger.json").exists()
    metrics: MetricRecord = next(d.reply.content["metrics"] for d in grid.deliveries if d.reply is not None)
    assert metrics["weight"] == 1
