"""bench.gpu_projection: the cost model fed a bench.gpu JSON's slot-pool blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import gpu_projection
from bench.cost_model import expected_tokens


def gpu_json(tmp_path: Path, g_ms: dict[str, float], s_ms: dict[str, float]) -> Path:
    rows = [
        {"config": "big", "shape": {"vocab": 1000}, "pool": {"block_ms": g_ms}},
        {"config": "small", "shape": {"vocab": 1000}, "pool": {"block_ms": s_ms}},
    ]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"meta": {"device": "test card"}, "rows": rows}))
    return path


def run(tmp_path: Path, path: Path, *extra: str) -> dict:
    args = ["--gpu", str(path), "--generalist", "big", "--specialist", "small", "--out", str(tmp_path), *extra]
    assert gpu_projection.main(args) == 0
    return json.loads((tmp_path / "gpu_projection.json").read_text())


def test_a_flat_block_cost_makes_specsteer_pay_and_the_numbers_follow_the_model(tmp_path: Path) -> None:
    # A block costs a step whatever its size (the GPU regime): 20 ms Generalist, 2 ms generic Specialist.
    flat_g, flat_s = {str(n): 20.0 for n in range(1, 10)}, {str(n): 2.0 for n in range(1, 10)}
    got = run(tmp_path, gpu_json(tmp_path, flat_g, flat_s), "--mean-accepted", "3", "--draft-step-ms", "1")
    at50 = got["by_rtt_ms"]["50"]
    k, a = at50["best_k"], got["acceptance_a"]
    # The formula by hand: E(K) tokens per (K drafts + both blocks + RTT).
    assert at50["specsteer"] == pytest.approx(expected_tokens(a, k) / (k * 0.001 + 0.022 + 0.050))
    assert at50["fusion"] == pytest.approx(1 / (0.001 + 0.020 + 0.002 + 0.050 + 1000 * 32 / 100e6))
    assert at50["llm_rounds"] == pytest.approx(1 / 0.070) and at50["llm_streamed"] == pytest.approx(50.0)
    assert at50["specsteer"] > 2 * at50["fusion"] and at50["specsteer"] > at50["llm_rounds"]
    page = (tmp_path / "gpu_projection.md").read_text()
    assert "test card" in page and "| 50 |" in page and "not part of it" in page


def test_a_config_without_pool_figures_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gpu_json(tmp_path, {"1": 1.0}, {"1": 1.0})
    args = ["--gpu", str(path), "--generalist", "huge", "--specialist", "small", "--mean-accepted", "2"]
    assert gpu_projection.main([*args, "--draft-step-ms", "5", "--out", str(tmp_path)]) == 1
    assert "huge has no slot-pool block times" in capsys.readouterr().err


def test_of_several_pool_paths_the_fastest_feeds_the_model() -> None:
    slow, fast = {"1": 9.0, "5": 10.0}, {"1": 4.0, "5": 5.0}
    row = {"config": "big", "pools": {"graphs": {"block_ms": slow}, "fused+compiled": {"block_ms": fast}}}
    assert gpu_projection.pool_blocks({"rows": [row]}, "big") == {1: 0.004, 5: 0.005}
    old = {"config": "big", "pool": {"block_ms": slow}}  # a JSON from before paths: its one pool
    assert gpu_projection.pool_blocks({"rows": [old]}, "big") == {1: 0.009, 5: 0.010}


def test_the_devices_work_around_its_forwards_is_priced_from_a_device_work_json(tmp_path: Path) -> None:
    flat_g, flat_s = {str(n): 20.0 for n in range(1, 10)}, {str(n): 2.0 for n in range(1, 10)}
    seconds = {"greedy_pick": 0.0001, "sampled_draw": 0.0003, "guard_check": 0.002, "fuse": 0.0005}
    work = tmp_path / "device_work.json"
    work.write_text(json.dumps({"seconds": seconds}))
    path = gpu_json(tmp_path, flat_g, flat_s)
    got = run(tmp_path, path, "--mean-accepted", "3", "--draft-step-ms", "1", "--device-work", str(work))
    at50 = got["by_rtt_ms"]["50"]
    k, a = at50["best_k"], got["acceptance_a"]
    # A greedy pick a draft (the acceptance is a greedy run's) and one guard check a round.
    assert at50["specsteer"] == pytest.approx(expected_tokens(a, k) / (k * 0.0011 + 0.002 + 0.022 + 0.050))
    # fusion: its step, a check, both cloud steps, the RTT, the vector over the link, its fusion.
    assert at50["fusion"] == pytest.approx(1 / (0.001 + 0.002 + 0.022 + 0.050 + 1000 * 32 / 100e6 + 0.0005))
    assert got["device_work_ms"]["guard_check"] == pytest.approx(2.0)
    assert "a guard check 2.000 ms a round" in (tmp_path / "gpu_projection.md").read_text()


def test_an_unreadable_device_work_json_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gpu_json(tmp_path, {"1": 1.0, "5": 1.0}, {"1": 1.0, "5": 1.0})
    (tmp_path / "work.json").write_text(json.dumps({"seconds": {"greedy_pick": 0.1}}))
    args = ["--gpu", str(path), "--generalist", "big", "--specialist", "small", "--mean-accepted", "2"]
    args += ["--draft-step-ms", "5", "--out", str(tmp_path), "--device-work", str(tmp_path / "work.json")]
    assert gpu_projection.main(args) == 1
    assert "Cannot read the bench.device_work JSON" in capsys.readouterr().err
