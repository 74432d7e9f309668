"""The privacy benchmark's smoke run: one query, every configuration, tiny models, over real TLS;
and the membership attack that scores many pairs without generating."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bench import privacy_page, privacy_report
from specsteer.core.models import load_causal_lm
from specsteer.privacy import membership
from specsteer.privacy.data import read_canaries
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
        "--membership-pairs",
        "100",
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
    # Padded frames on the wire: every Round the audit log recorded has one size.
    assert configs["on/padded"]["size_channel"]["distinct_sizes"] == 1
    assert configs["on/padded"]["round_bytes_mean"] == configs["on/padded"]["padded"]["round_bytes"]
    for label in ("off", "on", "keep-local", "on/padded", "control/off", "control/on"):
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
    # The likelihood attack: every (user, query) of the fixture is a pair (3 users x 4 queries < 100).
    lm = summary["membership_likelihood"]
    assert lm["pairs"] == 12 and lm["users"] == 3 and len(lm["member_scores"]) == len(lm["non_member_scores"]) == 12
    assert 0.0 <= lm["auroc"] <= 1.0 and 0.0 <= lm["tpr_at_1pct_fpr"] <= 1.0
    assert "Membership without generating: 12 member/non-member pairs" in table
    # The page is rendered again from its JSON with an adapter-canary result beside it, nothing rerun.
    adapter = tmp_path / "adapter.json"
    adapter.write_text(json.dumps(_adapter_result("python -m bench.adapter_canary --lr 0.02")))
    assert privacy_report.main(["--report-only", "--adapter-canary", str(adapter), "--out", str(out)]) == 0
    again = (out / "privacy.md").read_text()
    assert again.startswith(table.rstrip("\n")) and "The released global adapter" in again
    assert "`python -m bench.adapter_canary --lr 0.02`" in again
    assert (out / "privacy.png").stat().st_size > 1000
    # A second run resumes from the log instead of generating again.
    runs = (out / privacy_report.RUNS_LOG).read_text().count("\n")
    assert runs == len(privacy_report.CONFIGS)
    assert privacy_report.main(args) == 0
    assert (out / privacy_report.RUNS_LOG).read_text().count("\n") == runs


def test_membership_pairs_take_users_in_turn_and_the_entry_is_in_the_member_context_only(char_tok) -> None:
    pairs = privacy_report.membership_pairs(FIXTURES, 5)
    assert [p.user_id for p in pairs] == ["u04", "u09", "u12", "u04", "u09"]
    assert len(privacy_report.membership_pairs(FIXTURES, 1000)) == 12
    for p in pairs:
        assert p.entry in p.profile.entries and p.target
        # BM25 puts the entry first in the member's context.
        assert privacy_report.ProfileIndex(p.profile).retrieve(p.prompt, 1)[0] is p.entry


def test_likelihood_membership_generates_nothing_and_scores_each_pair(tmp_path, char_tok, monkeypatch) -> None:
    lm = load_causal_lm(str(save_tiny(tmp_path, char_tok, seed=1, name="s", layers=1, hidden=32)), progress=False)

    def no_generation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the likelihood attack must not generate")

    monkeypatch.setattr(privacy_report, "generate", no_generation)
    monkeypatch.setattr(lm.model, "generate", no_generation)
    calls = 0
    forward = lm.model.forward

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(lm.model, "forward", counting)
    pairs = privacy_report.membership_pairs(FIXTURES, 6)
    m = privacy_report.likelihood_membership(lm, pairs, max_tokens=8)
    assert m["pairs"] == 6 and calls == 4 * 6  # four forward passes a pair, no decoding loop
    assert len(m["member_scores"]) == 6 and 0.0 <= m["drafts_changed_share"] <= 1.0


def test_draft_membership_score_is_the_mean_log_likelihood_ratio_of_the_drafts() -> None:
    with_entry = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    without = torch.log(torch.tensor([[0.25, 0.5, 0.25], [0.2, 0.4, 0.4]]))
    score = membership.draft_membership_score(torch.tensor([0, 1]), with_entry, without)
    assert score == pytest.approx((math.log(2) + math.log(2)) / 2)
    assert membership.draft_membership_score(torch.tensor([1, 2]), with_entry, without) < 0


def _adapter_result(command: str) -> dict:
    """The fields of a `bench.adapter_canary` result that the privacy page reads."""
    models = {
        "base": {"label": "base model", "controls_summary": {"mean": 1.3}},
        "dp": {"label": "DP-SGD (σ = 1)", "controls_summary": {"mean": 1.5}},
    }
    return {
        "command": command,
        "settings": {"model": "tiny", "lr": 0.02, "rounds": 1, "dp_steps": 4},
        "canary": {"bits": 13.29},
        "models": models,
        "runs": {"dp": {"devices": [{"epsilon": 4.44, "held_out_loss": 3.9}]}},
        "planted": [{"exposure": {"base": 0.33, "dp": 3.2}, "rank": {"base": 7931.0, "dp": 1087.0}}],
    }


def test_report_only_adds_the_adapter_canary_to_the_page_and_refuses_a_bad_result(tmp_path) -> None:
    # Prepare: a finished run's results (only what the page needs) and one adapter-canary result.
    out = tmp_path / "results"
    out.mkdir()
    good, bad = tmp_path / "adapter.json", tmp_path / "broken.json"
    good.write_text(json.dumps(_adapter_result("python -m bench.adapter_canary --lr 0.02")))
    bad.write_text(json.dumps({"command": "x"}))
    summary = privacy_page.adapter_canary_summary(_adapter_result("c"))
    # Execute / Assert: the summary keeps each version's exposure, the controls and the claimed ε.
    assert summary["planted"][0]["exposure"]["dp"] == 3.2 and summary["epsilon"] == {"dp": [4.44]}
    lines = "\n".join(privacy_page.adapter_canary_lines([summary]))
    assert "3.20 (1087)" in lines and "0.33 (7931)" in lines and "4.44" in lines and "`c`" in lines
    # A result without the fields is refused with a sentence and exit code 1, before anything runs.
    assert privacy_report.main(["--adapter-canary", str(bad), "--report-only", "--out", str(out)]) == 1
    # --report-only without results to render is refused too.
    assert privacy_report.main(["--adapter-canary", str(good), "--report-only", "--out", str(out)]) == 1
