"""The load benchmark's smoke run: a real `server serve` process, concurrent sessions, tiny models."""

from __future__ import annotations

import json

from bench import load
from tests.tinymodels import save_tiny


def test_load_smoke_runs_concurrent_sessions_without_errors(tmp_path, char_tok) -> None:
    # Prepare
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = [
        "--sessions",
        "1",
        "3",
        "--max-new-tokens",
        "4",
        "--specialist",
        str(s_dir),
        "--generalist",
        str(g_dir),
        "--out",
        str(out),
    ]
    # Execute
    assert load.main(args) == 0
    # Assert
    rows = json.loads((out / "load.json").read_text())["rows"]
    assert [r["sessions"] for r in rows] == [1, 3]
    assert all(r["errors"] == 0 and r["rounds"] >= r["sessions"] for r in rows)
    assert all(r["verifier_peak_rss_mb"] > 0 and r["round_p99_ms"] >= r["round_p50_ms"] for r in rows)
    assert (out / "load.png").stat().st_size > 1000
