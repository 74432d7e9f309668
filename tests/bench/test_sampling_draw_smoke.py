"""bench.sampling_draw on small rows: both draws timed, and they draw the same tokens."""

from __future__ import annotations

import json

from bench import sampling_draw


def test_sampling_draw_smoke_times_both_and_they_agree(tmp_path) -> None:
    out = tmp_path / "results"
    assert sampling_draw.main(["--vocab", "5000", "--draws", "40", "--out", str(out)]) == 0
    data = json.loads((out / "sampling_draw.json").read_text())
    assert set(data["median_ms"]) == {"whole-vocabulary", "two-level"}
    assert all(ms > 0 for ms in data["median_ms"].values())
    assert data["same_tokens"] == 40 and data["vocab"] == 5000
    assert "| two-level |" in (out / "sampling_draw.md").read_text()
