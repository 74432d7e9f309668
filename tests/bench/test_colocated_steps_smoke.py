"""bench.colocated_steps on tiny models: the device's step medians in process, over gRPC and TLS
beside a real verifier on loopback, and in process again, next to the draft step timed alone."""

from __future__ import annotations

import json

from bench import colocated_steps
from tests.tinymodels import save_tiny


def test_colocated_steps_times_the_device_step_three_ways(tmp_path, char_tok) -> None:
    # Prepare
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = ["--specialist", str(s_dir), "--generalist", str(g_dir), "--queries", "1", "--max-new-tokens", "6"]
    # Execute
    assert colocated_steps.main([*args, "--reps", "1", "--out", str(out)]) == 0
    # Assert
    (written,) = out.glob("colocated_steps_*threads.json")
    data = json.loads(written.read_text())
    assert written.name == f"colocated_steps_{data['torch_threads']}threads.json"
    assert set(data["device_step_ms_median"]) == {"in_process", "grpc_tls", "in_process_again"}
    assert all(ms > 0 for ms in data["device_step_ms_median"].values()) and data["draft_step_alone_ms"] > 0
    assert data["command"].startswith("python -m bench.colocated_steps --specialist")
