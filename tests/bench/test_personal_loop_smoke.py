"""The personal-loop benchmark's smoke run: real Flower rounds, the sdk's adapter path, tiny models."""

from __future__ import annotations

import json
from pathlib import Path

from bench import personal_loop, personal_loop_report
from bench.style_split import RULE, in_style_part
from tests.tinymodels import save_tiny

FIXTURES = Path(__file__).parents[1] / "fixtures" / "users.jsonl"


def test_personal_loop_smoke_trains_generates_scores_and_resumes(tmp_path: Path, bpe_tok) -> None:
    # Prepare: the fixture BPE spends ~130 tokens on the prompt, hence 256-token sequences.
    s_dir = save_tiny(tmp_path, bpe_tok, seed=3, name="s", hidden=32, heads=2)
    g_dir = save_tiny(tmp_path, bpe_tok, seed=4, name="g", hidden=32, heads=2)
    out, work = tmp_path / "out", tmp_path / "work"
    args = [
        # --history 12: 8 entries train (4 held out), a DP sampling rate of 0.5, the device policy's default most.
        *("--data", str(FIXTURES), "--users", "3", "--queries-per-user", "1", "--history", "12"),
        *("--rounds", "1", "--dp-steps", "1", "--personal-steps", "1", "--max-len", "256", "--max-new-tokens", "4"),
        *("--specialist", str(s_dir), "--generalist", str(g_dir), "--work", str(work), "--out", str(out)),
        *("--alphas", "2"),  # one swept row (a gamma row takes the same path: rows_for below)
        *("--gates", "0.5:0.9:0.1"),  # the certainty gate, with the adapters and on the base weights
        *("--forms", "0.5:0.05"),  # the form rule, likewise
        *("--top-ks", "3"),  # the candidate count, with the adapters
        *("--no-repeats", "2"),  # the device's repetition stop: slm-rag and specsteer, both weights
        # torch keeps the smoke fast (the onnx drafter would convert each device's merged tiny model);
        # the default is what ships (tests/bench/test_device_path_defaults.py).
        *("--drafter", "torch"),
    ]
    # Execute
    assert personal_loop.main(args) == 0
    # Assert: every row for every query, scored on ROUGE and attribution, and the paired comparisons.
    result = json.loads((out / "personal_loop.json").read_text())
    summary = {s["config"]: s for s in result["summary"]}
    rows = [r.label for rows in personal_loop.rows_for("dp") for r in rows]
    assert set(rows) <= set(summary)
    assert all(summary[r]["n"] == 3 and summary[r]["users"] == 3 for r in rows)
    assert all(0.0 <= summary[r]["attribution"] <= 1.0 for r in rows)
    assert result["meta"]["queries_complete"] == {"dp": 3}
    # The real held-out bodies calibrate the classifier: on these clearly different authors it beats chance.
    assert summary[personal_loop_report.CEILING]["attribution"] > result["meta"]["chance"]
    pairs = {(d["row"], d["minus"], d["metric"]) for d in result["paired"]}
    slm_a, spec_a = (
        personal_loop_report.adapter_label("slm-rag", "dp"),
        personal_loop_report.adapter_label("specsteer", "dp"),
    )
    swept = personal_loop_report.sweep_label("dp", personal_loop_report.GAMMA, 2.0)
    for metric in ("rougeL", "attribution"):
        assert {(slm_a, "slm-rag", metric), (spec_a, "llm", metric), (spec_a, slm_a, metric)} <= pairs
        assert {(swept, "llm", metric), (swept, slm_a, metric)} <= pairs  # the sweep's row
    assert summary[swept]["n"] == 3
    gated = personal_loop_report.sweep_label("dp", 0.5, gate=(0.9, 0.1))
    gated_base = personal_loop_report.sweep_label(None, 0.5, gate=(0.9, 0.1))
    assert gated_base == "specsteer (gamma 0.5, gate 0.9/0.1)"
    for metric in ("rougeL", "attribution"):
        assert {(gated, "llm", metric), (gated, slm_a, metric)} <= pairs
        assert {(gated, spec_a, metric), (gated_base, "specsteer", metric)} <= pairs  # against the paper's rule
        assert {(gated_base, "llm", metric), (gated_base, "slm-rag", metric)} <= pairs  # no adapters: the device's own
    assert summary[gated]["n"] == summary[gated_base]["n"] == 3
    assert result["meta"]["alphas_swept"] == [1.0, 2.0] and result["meta"]["gammas_swept"] == [0.5]
    assert result["meta"]["gates_swept"] == [[0.9, 0.1]]
    formed = personal_loop_report.sweep_label("dp", 0.5, gamma_form=0.05)
    formed_base = personal_loop_report.sweep_label(None, 0.5, gamma_form=0.05)
    assert formed_base == "specsteer (gamma 0.5, form 0.05)"
    for metric in ("rougeL", "attribution"):
        assert {(formed, "llm", metric), (formed, slm_a, metric), (formed, spec_a, metric)} <= pairs
        assert {(formed_base, "specsteer", metric), (formed_base, "slm-rag", metric)} <= pairs
    assert summary[formed]["n"] == summary[formed_base]["n"] == 3
    assert result["meta"]["forms_swept"] == [0.05]
    few = personal_loop_report.sweep_label("dp", 0.5, top_k=3)
    assert few == "specsteer+adapters (dp, gamma 0.5, k 3)" and summary[few]["n"] == 3
    assert {(few, "llm", "rougeL"), (few, spec_a, "attribution")} <= pairs
    assert result["meta"]["top_ks_swept"] == [3, 10]
    sweep = personal_loop.rows_for("dp", (0.05,), (2.0,), ((0.7, (0.5, 0.2)),), ((0.5, 0.0),), (10, 30))[-2]
    assert [(r.gamma, r.alpha, r.top_k, r.gate, r.gamma_form) for r in sweep] == [
        (0.05, 1.0, 10, None, None),
        (0.5, 2.0, 10, None, None),
        (0.5, 1.0, 30, None, None),  # k 10 is the plain row
        (0.7, 1.0, 10, (0.5, 0.2), None),
        (0.5, 1.0, 10, None, 0.0),
    ]
    assert [personal_loop_report.swept_setting(r.label, "dp") for r in sweep] == [
        (0.05, 1.0, 10, 0.0, 0.0, None, 0),
        (0.5, 2.0, 10, 0.0, 0.0, None, 0),
        (0.5, 1.0, 30, 0.0, 0.0, None, 0),
        (0.7, 1.0, 10, 0.5, 0.2, None, 0),
        (0.5, 1.0, 10, 0.0, 0.0, 0.0, 0),
    ]
    # The repetition stop: slm-rag and specsteer under it, on both weights, each against the device
    # alone under the same stop; the runs log records the stop of every row.
    stopped = [
        personal_loop_report.sweep_label("dp", 0.5, no_repeat=2),
        personal_loop_report.stopped_device_label("dp", 2),
        personal_loop_report.sweep_label(None, 0.5, no_repeat=2),
        personal_loop_report.stopped_device_label(None, 2),
    ]
    assert stopped == [
        "specsteer+adapters (dp, gamma 0.5, no-repeat 2)",
        "slm-rag+adapters (dp, no-repeat 2)",
        "specsteer (gamma 0.5, no-repeat 2)",
        "slm-rag (no-repeat 2)",
    ]
    assert all(summary[label]["n"] == 3 for label in stopped)
    assert {(stopped[0], stopped[1], "rougeL"), (stopped[0], spec_a, "rougeL")} <= pairs
    assert {(stopped[2], stopped[3], "attribution"), (stopped[2], "specsteer", "attribution")} <= pairs
    assert {(stopped[1], slm_a, "rougeL"), (stopped[3], "slm-rag", "rougeL")} <= pairs  # the stop on the device alone
    assert len(result["paired"]) == len(pairs)  # each pair once
    assert result["meta"]["no_repeats_swept"] == [2]
    assert personal_loop_report.swept_setting(stopped[0], "dp").no_repeat == 2
    # Each row says how much of its text repeats itself, the real bodies too.
    assert all(0.0 <= summary[r]["repetition"] <= 1.0 for r in [*rows, personal_loop_report.CEILING])
    assert "repeated trigrams" in (out / "personal_loop.md").read_text()
    # The style measures were fitted on the style part only, which is recorded, and score a second way.
    assert result["meta"]["style_split"] == RULE
    assert all(0.0 <= summary[r]["style_delta"] <= 1.0 for r in rows)
    assert personal_loop_report.HISTORY_COPY in summary
    # Retrieval and the devices' training data hold the device part only.
    devices = [json.loads(line) for line in (work / "dp" / "devices.jsonl").read_text().splitlines()]
    assert not any(in_style_part(d["user_id"], e) for d in devices for e in d["profile"])
    # The federation trained: a new global version, every device's ledger spent ε, losses were evaluated.
    training = result["training"]["dp"]
    assert training["rounds"][0]["version_out"] == 1 and training["rounds"][0]["replies"] == [3]
    assert all(d["epsilon"] > 0 and len(d["losses"]) == 2 for d in training["devices"])
    assert training["losses"]["loss_v0"] > 0 and training["losses"]["loss_global_personal"] > 0
    # The adapters' rows declared the version the device holds; the base rows declared none.
    log = [json.loads(line) for line in (out / "personal_loop.runs.jsonl").read_text().splitlines()]
    assert {r["config"] for r in log if r["no_repeat_ngram"] == 2} == set(stopped)
    assert {r["no_repeat_ngram"] for r in log if r["config"] not in stopped} == {0}
    assert {r["adapter_version"] for r in log if r["variant"] == "dp"} == {1}
    assert {r["adapter_version"] for r in log if r["variant"] is None} == {0}
    # A rerun trains nothing and generates nothing: it resumes from WORK and the runs log.
    before = (out / "personal_loop.runs.jsonl").read_text()
    assert personal_loop.main(args) == 0
    assert (out / "personal_loop.runs.jsonl").read_text() == before
    assert len(personal_loop.Training(work / "dp", personal_loop.TrainSpec(**_spec(work))).rounds_done()) == 1
    # A WORK folder trained with other settings is refused with one line.
    assert personal_loop.main([*args[: args.index("--rounds") + 1], "2", *args[args.index("--rounds") + 2 :]]) == 1


def _spec(work: Path) -> dict:
    stored = json.loads((work / "dp" / "spec.json").read_text())
    return {**stored, "users": tuple(stored["users"])}


def test_repeated_trigram_share_counts_the_trigrams_that_repeat_an_earlier_one() -> None:
    share = personal_loop_report.repeated_trigram_share
    assert share("fix the bug in the parser") == 0.0
    # 8 trigrams, 3 distinct: "a b c" "b c a" "c a b" then the same three again, then "a b c"
    assert share("a b c a b c a b c a") == 1 - 3 / 8
    assert share("too short") == 0.0 and share("") == 0.0
