"""The privacy benchmark's smoke run: one query, every configuration, tiny models, over real TLS."""

from __future__ import annotations

import json
from pathlib import Path

from bench import privacy_report
from privacy.data import read_canaries
from tests.tinymodels import save_tiny

FIXTURES = Path(__file__).parents[1] / "fixtures" / "users.jsonl"


def test_privacy_report_smoke_writes_table_json_and_plot(tmp_path, char_tok) -> None:
    # Prepare
    # One-layer models: the private prompt is ~2000 characters (tokens, for this tokenizer).
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s", layers=1, hidden=32)
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g", layers=1, hidden=32)
    out, work = tmp_path / "results", tmp_path / "work"
    args = [
        "--data",
        str(FIXTURES),
        "--users",
        "2",
        "--queries-per-user",
        "1",
        "--max-new-tokens",
        "6",
        "--limit",
        "1",
        "--specialist",
        str(s_dir),
        "--generalist",
        str(g_dir),
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    # Execute
    assert privacy_report.main(args) == 0
    # Assert: every configuration ran once over the wire, with an audit log that verifies.
    summary = json.loads((out / "privacy.json").read_text())["summary"]
    configs = summary["configs"]
    assert list(configs) == [c.label for c in privacy_report.CONFIGS]
    bits = summary["canary_space"]["bits"]
    for label, c in configs.items():
        assert c["runs"] == 1 and c["audit_verified"] == 1, label
        assert len(c["exposures"]) == 1 and 0.0 <= c["exposures"][0] <= bits + 1e-9, label
        assert c["rounds"] >= 1 and c["size_channel"]["distinct_sizes"] >= 1
        # The constant-size frame closes the size channel: one size, zero bits.
        assert c["padded"]["distinct_sizes"] == 1 and c["padded"]["bits_about_session"] == 0.0
        assert c["padded"]["bits_about_user"] == 0.0
        assert 0.0 <= c["rougeL"] <= 1.0 and c["fallbacks"] in ({}, {"guard-keep-local": 1})
        assert 0 <= c["canary_verbatim_runs"] <= c["secret_in_uplink_runs"] <= 1
    assert len(summary["runs"]) == len(configs) and all(r["audit_verified"] for r in summary["runs"])
    # The canary sits in the private context of the runs that should have it, and only there.
    for label in ("off", "on", "keep-local", "control/off", "control/on"):
        assert configs[label]["canary_in_context"] == 1, label
    for label in ("off/swapped", "on/swapped", "off/non-member", "on/non-member"):
        assert configs[label]["canary_in_context"] == 0, label
    # The paired metrics exist for both guard settings, with sane ranges.
    for setting in ("off", "on"):
        paired = summary["paired"][setting]
        assert set(paired["ngram"]) == {"4", "8"}
        assert all(0 <= g["leaked"] <= g["uplink_ngrams"] and g["pairs"] == 1 for g in paired["ngram"].values())
        m = paired["membership"]
        assert m["pairs"] == 1 and 0.0 <= m["auroc"] <= 1.0 and 0.0 <= m["tpr_at_1pct_fpr"] <= 1.0
    # The canary file holds the planted canary; the secret never reaches the committed report.
    space, canaries = read_canaries(work / "canaries.json")
    assert space.size == 10**6 and len(canaries) == 1
    table = (out / "privacy.md").read_text()
    rendered = space.render(canaries[0].secret)
    assert rendered not in table and rendered not in (out / "privacy.json").read_text()
    assert "python -m bench.privacy_report" in table and "membership AUROC (1 pairs)" in table
    assert "leaky control, guard on" in table
    assert (out / "privacy.png").stat().st_size > 1000
    # A second run resumes from the log instead of generating again.
    runs = (out / privacy_report.RUNS_LOG).read_text().count("\n")
    assert runs == len(privacy_report.CONFIGS)
    assert privacy_report.main(args) == 0
    assert (out / privacy_report.RUNS_LOG).read_text().count("\n") == runs
