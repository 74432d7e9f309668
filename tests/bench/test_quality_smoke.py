"""The quality and sweep benchmarks' smoke runs: every config, tiny models, fixture data (CI keeps them working)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench import quality, sweep
from tests.tinymodels import save_tiny

FIXTURES = Path(__file__).parents[1] / "fixtures" / "users.jsonl"


@pytest.fixture
def tiny_dirs(tmp_path: Path, char_tok) -> tuple[Path, Path, Path]:
    """Two tiny Specialists and a tiny Generalist sharing one tokenizer."""
    return (
        save_tiny(tmp_path, char_tok, seed=1, name="s"),
        save_tiny(tmp_path, char_tok, seed=3, name="s2"),
        save_tiny(tmp_path, char_tok, seed=2, name="g"),
    )


def test_quality_smoke_writes_table_json_and_plot(tmp_path: Path, tiny_dirs: tuple[Path, Path, Path]) -> None:
    # Prepare
    s_dir, s2_dir, g_dir = tiny_dirs
    out = tmp_path / "results"
    args = [
        *("--data", str(FIXTURES), "--users", "2", "--queries-per-user", "1", "--max-new-tokens", "6"),
        *("--specialist", str(s_dir), "--alt-specialist", str(s2_dir), "--generalist", str(g_dir)),
        *("--out", str(out)),
        # torch: no onnx conversion of the tiny models (the default is what ships: test_device_path_defaults.py).
        *("--drafter", "torch"),
    ]
    # Execute
    assert quality.main(args) == 0
    # Assert: every row of the paper's table shape, with standard errors and paired intervals.
    data = json.loads((out / "quality.json").read_text())
    summary = data["summary"]
    assert [row["config"] for row in summary] == [c.label for c in quality.CONFIGS]
    assert all(row["n"] == 2 and 0.0 <= row["rougeL"] <= 1.0 and row["rougeL_se"] >= 0 for row in summary)
    assert {row["specialist"] for row in summary if row["config"].startswith("alt ")} == {str(s2_dir)}
    assert data["meta"]["queries_complete"] == 2
    fusion = next(c for c in data["meta"]["configs"] if c["label"].startswith("fusion"))
    assert fusion["top_k"] == "vocabulary size"
    paired = {(d["row"], d["minus"], d["metric"]): d for d in data["paired"]}
    for baseline in ("slm-rag", "llm"):
        d = paired[(quality.SPECSTEER, baseline, "rougeL")]
        assert d["n"] == 2 and d["ci95"][0] <= d["mean"] <= d["ci95"][1]
    table = (out / "quality.md").read_text()
    assert "specsteer gamma=0.1" in table and "literal" in table and "95 % interval" in table
    assert (out / "quality.png").stat().st_size > 1000
    # A second run resumes from the log instead of generating again.
    runs = (out / "quality.runs.jsonl").read_text().count("\n")
    assert quality.main(args) == 0
    assert (out / "quality.runs.jsonl").read_text().count("\n") == runs
    # The report can be rebuilt from the log alone.
    (out / "quality.md").unlink()
    assert quality.main([*args, "--report-only"]) == 0
    rebuilt = (out / "quality.md").read_text()
    assert rebuilt[rebuilt.index("| config") :] == table[table.index("| config") :]


def test_fusion_row_steers_over_the_whole_vocabulary(tmp_path: Path, tiny_dirs: tuple[Path, Path, Path]) -> None:
    s_dir, _, g_dir = tiny_dirs
    out = tmp_path / "results"
    label = next(c.label for c in quality.CONFIGS if c.full_vocab)
    args = [
        *("--data", str(FIXTURES), "--users", "1", "--queries-per-user", "1", "--max-new-tokens", "3"),
        *("--specialist", str(s_dir), "--alt-specialist", str(s_dir), "--generalist", str(g_dir)),
        *("--out", str(out), "--configs", label, "llm", "--drafter", "torch"),
    ]
    assert quality.main(args) == 0
    rows = {r["config"]: r for r in map(json.loads, (out / "quality.runs.jsonl").read_text().splitlines())}
    # One value per vocabulary entry (100 here, a dense float32 fusion vector) comes down each
    # step, not the default k = 10 candidates that `llm`'s downlink carries.
    per_token_fusion = rows[label]["downlink_bytes"] / rows[label]["rounds"]
    per_token_llm = rows["llm"]["downlink_bytes"] / rows["llm"]["rounds"]
    assert per_token_fusion >= 4 * 100 and per_token_fusion > 3 * per_token_llm


def test_bootstrap_interval_and_standard_error() -> None:
    diffs = [0.1, 0.2, 0.3, 0.4]
    low, high = quality.bootstrap_ci(diffs)
    assert 0.1 <= low < statistics.fmean(diffs) < high <= 0.4
    assert quality.bootstrap_ci([0.05] * 5) == (0.05, 0.05)
    mean, se = quality.mean_se([1.0, 3.0])
    assert (mean, se) == (2.0, 1.0)
    assert quality.mean_se([0.5]) == (0.5, 0.0)


def test_queries_round_robin_over_users() -> None:
    queries = quality.load_queries(FIXTURES, 2, 2)
    users = [u["user_id"] for u, _ in queries]
    assert users[:2] != [users[0], users[0]]  # every user's first query before any second one
    assert len(set(users[:2])) == 2


def test_sweep_smoke_reports_every_setting(tmp_path: Path, tiny_dirs: tuple[Path, Path, Path]) -> None:
    s_dir, s2_dir, g_dir = tiny_dirs
    out = tmp_path / "sweep"
    args = [
        *("--data", str(FIXTURES), "--skip-users", "1", "--users", "1", "--max-new-tokens", "4"),
        *("--generalist", str(g_dir), "--out", str(out), "--drafter", "torch"),
        "--specialist-map",
        f"{sweep.QWEN05}={s_dir}",
        f"{sweep.SMOLLM2}={s2_dir}",
    ]
    assert sweep.main(args) == 0
    data = json.loads((out / "sweep.json").read_text())
    assert [s["setting"] for s in data["summary"]] == [s.label for s in sweep.SETTINGS]
    assert data["meta"]["users"] == [json.loads(FIXTURES.read_text().splitlines()[1])["user_id"]]
    assert "Best ROUGE-L among the settings with n = 1" in (out / "sweep.md").read_text()
    runs = (out / "sweep.runs.jsonl").read_text().count("\n")
    assert sweep.main(args) == 0
    assert (out / "sweep.runs.jsonl").read_text().count("\n") == runs


def test_the_runs_log_keys_rows_by_their_label_and_skips_what_is_done(tmp_path: Path, capsys) -> None:
    """`bench.quality` and `bench.sweep` share one runs log reader and writer (`RunsLog`)."""
    from specsteer.core.session_types import SessionParams

    log = tmp_path / "deep" / "sweep.runs.jsonl"
    assert quality.RunsLog(log, "setting").done == {} and log.parent.is_dir()
    rows = [
        {"user": "u1", "subject": "s", "setting": "base", "max_new_tokens": 4},
        {"user": "u1", "subject": "s", "setting": "older"},  # a row from before lengths were logged
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = quality.RunsLog(log, "setting")
    assert set(runs.done) == {("u1", "s", "base", 4), ("u1", "s", "older", 0)}
    # What the log has is not generated again (no model is touched: `pairs` is never used).
    runs.run(None, "model", {"user_id": "u1"}, {"subject": "s"}, "base", SessionParams(), 4)  # type: ignore[arg-type]
    assert capsys.readouterr().out == "" and log.read_text().count("\n") == 2
