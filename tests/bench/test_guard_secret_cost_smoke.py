"""bench.guard_secret_cost runs and writes its page and JSON (the figures are the benchmark's)."""

from __future__ import annotations

import json

from bench import guard_secret_cost


def test_the_secret_cost_bench_writes_rows_for_each_count(tmp_path) -> None:
    assert guard_secret_cost.main(["--counts", "2", "8", "--reps", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "guard_secret_cost.json").read_text())["rows"]
    assert [r["secrets"] for r in rows] == [2, 8]
    assert rows[0]["check_ratio"] == 1.0 and all(r["check_ms"] > 0 for r in rows)
