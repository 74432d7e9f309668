"""bench.gpu_verdict: issue 27's criteria read off bench.gpu / bench.speed / bench.gpu_projection JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import gpu_verdict

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def _pool(step_ms: float, floor_ms: float, batch64: float) -> dict:
    return {
        "block_ms": {"1": step_ms, "5": step_ms * 1.05},
        "block_vs_floor": {"1": step_ms / floor_ms, "5": step_ms * 1.05 / floor_ms},
        "batch_throughput_vs_one": {"1": 1.0, "64": batch64},
    }


def _by(verdicts: list[gpu_verdict.Verdict]) -> dict[str, gpu_verdict.Verdict]:
    return {v.criterion: v for v in verdicts}


def test_the_first_h200_run_misses_the_floor_and_meets_the_round_and_batching_criteria() -> None:
    first = json.loads((RESULTS / "gpu.json").read_text())
    by = _by(gpu_verdict.gpu_verdicts([first]))
    big = by["Qwen3-32B step and 5-token block / bandwidth floor"]
    assert big.holds is False and big.figure.startswith("1.73x / 1.86x (graphs, NVIDIA H200)")
    assert by["Qwen2.5-1.5B step and 5-token block"].holds is False
    assert by["a whole verify round / its two blocks alone: qwen3-32b + qwen3-0.6b"].holds is True
    assert by["qwen2.5-7b: 64 sessions' verified tokens/s / one session's"].holds is True
    assert by["qwen3-32b: 64 sessions' verified tokens/s / one session's"].holds is None  # reported only


def test_each_criterion_takes_the_fastest_path_of_the_last_run_that_measured_it() -> None:
    first = {"meta": {"device": "A"}, "rows": [{"config": "qwen3-32b", "pool": _pool(26.7, 15.4, 26.0)}]}
    later = {
        "meta": {"device": "B"},
        "rows": [
            {
                "config": "qwen3-32b",
                "pools": {"graphs": _pool(26.0, 15.4, 26.0), "fused+compiled": _pool(18.0, 15.4, 30.0)},
            },
            {"config": "qwen2.5-1.5b", "pools": {"fused+compiled": _pool(2.4, 0.75, 40.0)}},
        ],
    }
    by = _by(gpu_verdict.gpu_verdicts([first, later]))
    big = by["Qwen3-32B step and 5-token block / bandwidth floor"]
    assert big.holds is True and "(fused+compiled, B)" in big.figure  # 1.17x and 1.23x
    # The step makes 2.5 ms, the block (2.52 ms) does not: both must.
    assert by["Qwen2.5-1.5B step and 5-token block"].holds is False
    assert by["qwen2.5-7b: 64 sessions' verified tokens/s / one session's"].figure == "not measured"
    assert by["a whole verify round / its two blocks alone"].holds is None
    # Serving-sized slots (bench.gpu --slot-len): the windowed and whole-slot replays beside the scale.
    sized = _pool(2.4, 0.75, 40.0) | {"slot_len": 2048, "batch_window": 1024}
    sized |= {"batch_ms": {"1": 2.5, "64": 4.0}, "whole_slot_batch_ms": {"1": 2.6, "64": 6.5}}
    later["rows"][1]["pools"]["fused+compiled"] = sized
    figure = _by(gpu_verdict.gpu_verdicts([later]))["qwen2.5-1.5b: 64 sessions' verified tokens/s / one session's"]
    assert figure.figure.endswith(
        "in 2048-position slots, 64 sessions' replay 4.00 ms over a 1024-column window, 6.50 ms over the whole slots"
    )
    # A later run without the 32B leaves the earlier one's figures standing.
    alone = _by(gpu_verdict.gpu_verdicts([later, {"meta": {"device": "C"}, "rows": []}]))
    assert "(fused+compiled, B)" in alone["Qwen3-32B step and 5-token block / bandwidth floor"].figure


def test_end_to_end_rows_are_held_to_the_model_within_ten_percent() -> None:
    rows = [
        {"method": "fusion", "rtt_ms": 0.0, "measured_vs_model": 0.95},
        {"method": "specsteer", "rtt_ms": 50.0, "measured_vs_model": 1.08},
        {"method": "llm (in cloud)", "rtt_ms": 50.0, "measured_vs_model": None},
    ]
    (within,) = gpu_verdict.e2e_verdicts({"rows": rows})
    assert within.holds is True and within.figure.startswith("2 of 2 rows within (RTTs 0, 50 ms)")
    rows.append({"method": "specsteer", "rtt_ms": 100.0, "measured_vs_model": 0.85})
    (off,) = gpu_verdict.e2e_verdicts({"rows": rows})
    assert off.holds is False and "worst 0.85 (specsteer, RTT 100 ms)" in off.figure
    assert gpu_verdict.e2e_verdicts(None)[0].holds is None
    # bench.speed's rows say how much of a round the cost model prices nowhere: the figure names it.
    rows[-1] |= {"seconds": 2.0, "rounds": 10, "unmodelled_seconds_per_round": 0.031}
    (off,) = gpu_verdict.e2e_verdicts({"rows": rows})
    assert "(specsteer, RTT 100 ms; a round: 200.0 ms measured, 31.0 ms of it the model prices nowhere)" in off.figure
    # ...and how much of that the stream took beyond the verifier's round and the path's round trip.
    rows[-1]["stream_seconds_per_round"] = 0.004
    (off,) = gpu_verdict.e2e_verdicts({"rows": rows})
    assert "31.0 ms of it the model prices nowhere, 4.0 ms of which the stream's wait" in off.figure


def test_the_live_verifiers_round_is_held_to_its_blocks_by_its_worst_method() -> None:
    rounds = {
        "generalist": "g",
        "specialist": "s",
        "kv": "slots",
        "device": "NVIDIA H200",
        "rows": [{"method": "specsteer", "round_vs_blocks": 1.08}, {"method": "fusion", "round_vs_blocks": 1.02}],
    }
    (held,) = gpu_verdict.cloud_round_verdicts(rounds)
    assert held.holds is True and held.criterion == "the live verifier's round / its blocks alone (g + s, slots)"
    assert held.figure == "specsteer 1.08x, fusion 1.02x (NVIDIA H200)"
    rounds["rows"].append({"method": "llm", "round_vs_blocks": 1.4})
    assert gpu_verdict.cloud_round_verdicts(rounds)[0].holds is False
    assert gpu_verdict.cloud_round_verdicts(None)[0].figure == "not measured"


def test_the_projection_criteria_and_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    projection = RESULTS / "gpu_projection_onnx_int4.json"
    by = _by(gpu_verdict.projection_verdicts(json.loads(projection.read_text())))
    at50 = by["projection (qwen3-32b + qwen3-0.6b): specsteer / fusion at RTT 50 ms"]
    assert at50.holds is True and at50.figure.startswith("3.15x (K=4")
    args = ["--gpu", str(RESULTS / "gpu.json"), "--projection", str(projection), "--out", str(tmp_path)]
    assert gpu_verdict.main(args) == 0
    written = json.loads((tmp_path / "gpu_verdict.json").read_text())
    assert {v["criterion"] for v in written["verdicts"]} >= set(by)
    assert "**does not hold**" in (tmp_path / "gpu_verdict.md").read_text()
    capsys.readouterr()
    assert gpu_verdict.main(["--gpu", str(tmp_path / "missing.json")]) == 1
    assert capsys.readouterr().err.startswith("bench.gpu_verdict: error: Cannot read the bench.gpu JSON")
    (tmp_path / "other.json").write_text('{"by_rtt_ms": {}}')  # valid JSON, but not a projection's
    assert gpu_verdict.main(["--projection", str(tmp_path / "other.json")]) == 1
    assert "lacks what one holds (KeyError" in capsys.readouterr().err
