"""The quality benchmark's smoke run: every config, tiny models, fixture data (CI keeps it working)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import quality
from tests.tinymodels import save_tiny

FIXTURES = Path(__file__).parents[1] / "fixtures" / "users.jsonl"


def test_quality_smoke_writes_table_json_and_plot(tmp_path, char_tok) -> None:
    # Prepare
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = [
        "--data",
        str(FIXTURES),
        "--users",
        "2",
        "--queries-per-user",
        "1",
        "--max-new-tokens",
        "6",
        "--specialist",
        str(s_dir),
        "--generalist",
        str(g_dir),
        "--out",
        str(out),
    ]
    # Execute
    assert quality.main(args) == 0
    # Assert: every row of the paper's table shape, per-user spread, and the files.
    summary = json.loads((out / "quality.json").read_text())["summary"]
    assert [row["config"] for row in summary] == [c.label for c in quality.CONFIGS]
    assert all(row["n"] == 2 and 0.0 <= row["rougeL"] <= 1.0 for row in summary)
    table = (out / "quality.md").read_text()
    assert "specsteer gamma=0.01" in table and "literal" in table
    assert (out / "quality.png").stat().st_size > 1000
    # A second run resumes from the log instead of generating again.
    runs = (out / "quality.runs.jsonl").read_text().count("\n")
    assert quality.main(args) == 0
    assert (out / "quality.runs.jsonl").read_text().count("\n") == runs
