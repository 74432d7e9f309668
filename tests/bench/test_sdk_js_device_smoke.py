"""bench.sdk_js_device's summary and page on a fixture result: the real runs need the 400 MB
bundle and Node (`python -m bench.sdk_js_device`), the arithmetic and the page do not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import sdk_js_device


def _run(runtime: str, steps: list[float], rss: float, load: float, drafted: list[int]) -> dict[str, Any]:
    node = {"node_memory_mb": {"heapUsed": 90.0, "heapTotal": 120.0, "arrayBuffers": 5.0}} if "node" in runtime else {}
    return {
        **node,
        "runtime": runtime,
        "load_ms": {"open_verify": 500.0, "tokenizer": 900.0, "drafter": 1500.0},
        "prefill_ms": 10000.0,
        "step_ms": steps,
        "row_ms": [steps[0] / 10],
        "vocab": 151936,
        "drafted": drafted,
        "rounds_agree": True,
        "vm_hwm_mb": rss,
        "peak_rss_mb": rss,
        "wall_s": 30.0,
        "load_s": load,
    }


def _result(python_drafts: list[int]) -> dict[str, Any]:
    runs = {
        "typescript": [_run("onnxruntime-node", [10.0, 20.0, 30.0], 800.0, 6.0, [1, 2, 3])] * 2,
        "python": [_run("onnxruntime-genai", [5.0, 10.0, 15.0], 400.0, 3.0, python_drafts)] * 2,
    }
    return {
        "command": "python -m bench.sdk_js_device --runs 2",
        "machine": {
            "platform": "x86_64, 2 CPUs, Linux",
            "load_average_before": 8.0,
            "load_average_after": 9.0,
            "shared": "yes",
        },
        "bundle": "/bundles/b",
        "files": {},
        "prompt": {"case": "demo-query-0", "source": "conformance/v1/prompts/render.json", "tokens": 657},
        "steps": 3,
        "reps": 1,
        "threads": 2,
        "runs": runs,
        "summary": sdk_js_device.summarize(runs),
    }


def test_summary_pools_the_steps_and_gives_ts_over_python_ratios() -> None:
    # Prepare / Execute
    s = _result([1, 2, 3])["summary"]
    # Assert: steps pooled over both runs (median of 10,20,30,10,20,30 is 20), ratios TS/Python.
    assert s["typescript"]["step_ms_median"] == 20.0 and s["python"]["step_ms_median"] == 10.0
    assert s["typescript"]["step_ms_p90"] == pytest.approx(30.0)
    assert s["ratio_ts_over_python"]["step_ms_median"] == 2.0
    assert s["ratio_ts_over_python"]["peak_rss_mb_median"] == 2.0
    assert s["ratio_ts_over_python"]["load_s_median"] == 2.0
    assert s["same_greedy_tokens"] is True and s["drafted_tokens"] == 3


def test_a_divergent_draft_is_reported_with_its_position() -> None:
    s = _result([1, 2, 9])["summary"]
    assert s["same_greedy_tokens"] is False and s["first_divergence"] == 2
    assert "NO: the drafts part at token 2" in sdk_js_device.markdown(_result([1, 2, 9]))


def test_from_json_renders_the_page_with_the_command_and_the_shared_machine_caveat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_result([1, 2, 3])), encoding="utf-8")
    # Execute
    assert sdk_js_device.main(["--from-json", str(path)]) == 0
    # Assert
    page = capsys.readouterr().out
    assert "`python -m bench.sdk_js_device --runs 2`" in page
    assert "**The machine is shared**" in page
    assert "| TS / Python | | 2.00x | 2.00x | 1.00x | 2.00x |" in page
    assert page.count("| TypeScript (sdk-js) |") == 3  # the summary row and both runs
    assert "V8 heap 90 MB used of 120 MB" in page
    assert "151,936-logit row" in page and "1.00 ms in TypeScript" in page and "0.50 ms in Python" in page
