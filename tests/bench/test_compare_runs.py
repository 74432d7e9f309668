"""bench.compare_runs: paired differences between two runs logs, only over what both ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.compare_runs import compare, main


def _log(path: Path, rows: list[tuple[str, str, float, str]]) -> Path:
    lines = [
        {"user": u, "subject": f"s-{u}", "config": c, "max_new_tokens": 64, "rouge1": r, "rougeL": r, "text": t}
        for u, c, r, t in rows
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_differences_are_paired_and_skip_what_only_one_log_ran(tmp_path: Path) -> None:
    runs = _log(tmp_path / "a.jsonl", [("u0", "llm", 0.3, "x"), ("u1", "llm", 0.1, "y"), ("u2", "llm", 0.9, "z")])
    base = _log(tmp_path / "b.jsonl", [("u0", "llm", 0.2, "x"), ("u1", "llm", 0.3, "q"), ("u9", "llm", 0.0, "w")])
    (entry,) = compare(runs, base)
    assert entry["config"] == "llm" and entry["n"] == 2 and entry["identical"] == 1
    assert entry["rougeL"]["mean_diff"] == pytest.approx((0.1 - 0.2) / 2)
    lo, hi = entry["rougeL"]["ci95"]
    assert lo == pytest.approx(-0.2) and hi == pytest.approx(0.1)


def test_a_missing_log_is_one_sentence_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _log(tmp_path / "b.jsonl", [("u0", "llm", 0.2, "x")])
    assert main(["--runs", str(tmp_path / "nope.jsonl"), "--baseline", str(base)]) == 1
    assert "no runs log" in capsys.readouterr().err
