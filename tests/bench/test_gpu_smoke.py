"""bench.gpu's smoke run on the CPU: a tiny configuration, every section, seconds."""

from __future__ import annotations

import json

import pytest
import torch

from bench import gpu
from specsteer.server.slot_pool import GRAPH_MIN_WINDOW


def test_gpu_bench_smoke_measures_every_section_beside_its_floor(tmp_path) -> None:
    # Execute: the CPU in fp32, uncompiled (the static-cache path and its rewinds still run).
    args = ["--device", "cpu", "--dtype", "float32", "--configs", "tiny", "--context", "48", "--reps", "2"]
    args += ["--blocks", "1,2,5", "--compiled-blocks", "1,5", "--batches", "1,4", "--copy-mib", "8"]
    args += ["--pool-batches", "1,4", "--round-batches", "1,4", "--pool-paths", "graphs,fused"]
    assert gpu.main([*args, "--out", str(tmp_path)]) == 0
    # Assert
    data = json.loads((tmp_path / "gpu.json").read_text())
    meta, (row,) = data["meta"], data["rows"]
    assert meta["copy_rate_bytes_per_s"] > 0 and "random" in meta["weights"]
    assert set(row["eager_ms"]) == set(row["floor_ms"]) == {"1", "2", "5"}
    assert set(row["static_ms"]) == {"1", "5"} and row["static_compiled"] is False
    assert all(v > 0 for v in row["eager_vs_floor"].values())
    # The static cache, rewound in place after every timed block, still gives the eager path's logits.
    assert row["static_vs_eager_max_abs_diff"] < 1e-4
    # (floors in ms to 3 places: a fast copy probe makes the tiny model's two equal there)
    assert set(row["batch_ms"]) == {"1", "4"} and row["batch_floor_ms"]["4"] >= row["batch_floor_ms"]["1"]
    # The lean path (uncompiled on a CPU), on both forwards: every block and batch, and a whole
    # round of the tiny pair (on the fused forward, asked for).
    assert set(row["pools"]) == {"graphs", "fused"} and not row["pool_errors"]
    for path, pool in row["pools"].items():
        assert pool["path"] == path and pool["fused"] == (path == "fused") and not pool["compiled"]
        assert set(pool["block_ms"]) == set(pool["block_vs_floor"]) == {"1", "2", "5"}
        assert set(pool["batch_ms"]) == {"1", "4"} and pool["slots"] == 4
        assert pool["slot_len"] == pool["batch_window"] == 48 + 5 + 1 and "whole_slot_batch_ms" not in pool
    assert row["round"]["fused"]
    (one, four) = (row["round"]["by_batch"][b] for b in ("1", "4"))
    assert one["round_ms"] > 0 and four["read_back_bytes"] == 4 * one["read_back_bytes"]
    page = (tmp_path / "gpu.md").read_text()
    assert "| tiny | tiny | 4 |" in page and "Lean path" in page and "| tiny | fused | 4 |" in page
    assert meta["device"] in page and "random" in page and "| tiny | eager |" in page


def test_serving_sized_slots_are_timed_windowed_and_whole(tmp_path) -> None:
    """Slots of a server's length (--slot-len): a replay attends over the window the server would
    give it (GRAPH_MIN_WINDOW here), and the batches are also timed over the whole slots."""
    args = ["--device", "cpu", "--dtype", "float32", "--configs", "tiny", "--context", "48", "--reps", "2"]
    args += ["--blocks", "1", "--compiled-blocks", "1", "--batches", "1", "--copy-mib", "8"]
    args += ["--pool-batches", "1,4", "--round-batches", "1", "--pool-paths", "fused", "--slot-len", "600"]
    assert gpu.main([*args, "--out", str(tmp_path)]) == 0
    pool = json.loads((tmp_path / "gpu.json").read_text())["rows"][0]["pools"]["fused"]
    assert pool["slot_len"] == 600 and pool["batch_window"] == GRAPH_MIN_WINDOW
    assert set(pool["whole_slot_batch_ms"]) == set(pool["batch_ms"]) == {"1", "4"}
    page = (tmp_path / "gpu.md").read_text()
    assert f"| tiny | fused | 4 | {pool['batch_ms']['4']:.2f} |" in page
    assert f"| 600, {GRAPH_MIN_WINDOW} | {pool['whole_slot_batch_ms']['4']} |" in page


def test_floor_counts_weights_once_and_kv_per_session() -> None:
    shape = gpu.CONFIGS["qwen3-32b"]
    # 64 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 256 KiB a token.
    assert gpu.kv_bytes(shape, 1, 1, 2) == 64 * 8 * 128 * 2 * 2
    assert gpu.kv_bytes(shape, 64, 512, 2) == 64 * 512 * gpu.kv_bytes(shape, 1, 1, 2)
    with torch.device("meta"):
        tied = gpu.AutoModelForCausalLM.from_config(gpu.hf_config(gpu.CONFIGS["qwen3-0.6b"], 512))
        untied = gpu.AutoModelForCausalLM.from_config(gpu.hf_config(gpu.CONFIGS["qwen3-32b"], 512))
    # Qwen3-0.6B's embedding is its output head (read whole, once); Qwen3-32B's is only looked up.
    assert gpu.weight_bytes(tied) == sum(p.numel() * 4 for p in tied.parameters())
    embed = 151936 * 5120 * 4
    assert gpu.weight_bytes(untied) == sum(p.numel() * 4 for p in untied.parameters()) - embed
    assert 32.0e9 < sum(p.numel() for p in untied.parameters()) < 33.5e9  # Qwen3-32B: 32.8B parameters


def test_unknown_configuration_is_one_sentence(capsys) -> None:
    assert gpu.main(["--device", "cpu", "--configs", "qwen9-1t", "--out", "/nonexistent"]) == 1
    assert "Unknown configuration 'qwen9-1t'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused(capsys) -> None:
    assert gpu.main(["--device", "cuda", "--configs", "tiny", "--out", "/nonexistent"]) == 1
    assert "sees no CUDA GPU" in capsys.readouterr().err


def test_a_compiled_pool_path_runs_only_where_asked_and_in_time(tmp_path) -> None:
    args = ["--device", "cpu", "--dtype", "float32", "--configs", "tiny", "--context", "16", "--reps", "1"]
    args += ["--blocks", "1", "--batches", "1", "--pool-batches", "1", "--round-batches", "1", "--copy-mib", "8"]
    args += ["--pool-paths", "fused,fused+compiled", "--compile-configs", "qwen3-32b", "--out", str(tmp_path)]
    assert gpu.main(args) == 0
    (row,) = json.loads((tmp_path / "gpu.json").read_text())["rows"]
    assert set(row["pools"]) == {"fused"} and row["pools"]["fused"]["compiled_graphs"] == 0
    assert row["pool_skipped"] == {"fused+compiled": "tiny is not among --compile-configs"}
    assert "| tiny | fused+compiled: not measured: tiny is not among --compile-configs |" in (
        (tmp_path / "gpu.md").read_text()
    )
