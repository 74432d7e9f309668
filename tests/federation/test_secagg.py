"""SecAgg+ (Flower's legacy workflow inside our ServerApp): the server learns only the average."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message

import federation.device
from federation.ledger import Ledger
from federation.simulation import run_in_process
from federation.store import AdapterStore
from tests.federation.conftest import node_configs, run_config


def _capture(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, np.ndarray]]:
    """Record, per device, the global adapter its DP training produced (what it would send)."""
    captured: dict[str, dict[str, np.ndarray]] = {}
    real = federation.device.train_global_dp

    def wrapper(sw: Any, train_set: Any, cfg: Any, ledger: Ledger | None, **kwargs: Any) -> Any:
        result = real(sw, train_set, cfg, ledger, **kwargs)
        assert ledger is not None
        captured[ledger.path.parent.name] = {k: v.copy() for k, v in result.arrays.items()}
        return result

    monkeypatch.setattr(federation.device, "train_global_dp", wrapper)
    return captured


def _windows(arrays: dict[str, np.ndarray]) -> list[bytes]:
    out = []
    for arr in arrays.values():
        flat = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1)
        out += [flat[i : i + 4].tobytes() for i in range(0, flat.size - 3, 4) if np.any(flat[i : i + 4] != 0)]
    return out


def test_secagg_server_sees_only_the_average(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = _capture(monkeypatch)
    config = run_config(tiny_bpe_model, tmp_path, secagg=True, **{"min-clients": 3})
    summary, grid = run_in_process(config, node_configs(tiny_bpe_model, tmp_path, 3))

    assert summary["secure_aggregation"] is True
    assert (summary["version_in"], summary["version_out"]) == (0, 1)
    assert summary["rounds"][0]["replies"] == 3
    v1 = AdapterStore(tmp_path / "server" / "adapters").arrays(1)
    assert sorted(captured) == ["device0", "device1", "device2"]
    for key, value in v1.items():
        mean = np.mean([captured[d][key] for d in captured], axis=0)
        np.testing.assert_allclose(value, mean, atol=1e-4)  # SecAgg+ quantizes to 2^22 levels

    # No device's adapter appears in anything it sent: only masked, quantized vectors leave.
    sent = b"".join(b for d in grid.deliveries for b in d.sent_bytes)
    for device, arrays in captured.items():
        windows = _windows(arrays)
        assert windows and not any(w in sent for w in windows), device
    stages = {
        d.message.content["secaggplus_configs"]["stage"]
        for d in grid.deliveries
        if d.message.metadata.message_type == "train"
    }
    assert stages == {"setup", "share_keys", "collect_masked_vectors", "unmask"}


def test_secagg_survives_a_dropout_after_keys_are_shared(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = _capture(monkeypatch)

    def vanish_before_sending_its_vector(msg: Message) -> bool:
        configs = msg.content.config_records.get("secaggplus_configs")
        return configs is not None and configs["stage"] == "collect_masked_vectors"

    config = run_config(tiny_bpe_model, tmp_path, secagg=True, **{"min-clients": 3})
    summary, _ = run_in_process(
        config, node_configs(tiny_bpe_model, tmp_path, 3), dropouts={2: vanish_before_sending_its_vector}
    )
    assert summary["version_out"] == 1 and summary["rounds"][0]["replies"] == 2
    assert sorted(captured) == ["device0", "device1"]
    v1 = AdapterStore(tmp_path / "server" / "adapters").arrays(1)
    for key, value in v1.items():
        np.testing.assert_allclose(value, (captured["device0"][key] + captured["device1"][key]) / 2, atol=1e-4)
