"""bench.sdk_js_live's verdicts, totals and page on a fixture result: the real run needs the
default pair, the bundle and Node (`python -m bench.sdk_js_live`), the arithmetic and the page do not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import sdk_js_live


def _device(ids: list[int], text: str, rounds: int = 3) -> dict[str, Any]:
    return {
        "token_ids": ids,
        "text": text,
        "private_ids": [1, 2, 3],
        "public_ids": [2],
        "examples": ["a subject"],
        "stats": {"rounds": rounds, "drafted": 8, "accepted": 5, "fallback": None},
        "wall_s": 12.5,
    }


def _row(qid: str, py: dict[str, Any], ts: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": qid,
        "source": "dev.jsonl, author u00, query 0",
        "subject": "a | subject",
        "public_tokens": 1,
        "private_tokens": 3,
        "compare": sdk_js_live.compare(py, ts),
        "python": py,
        "typescript": ts,
    }


def _result() -> dict[str, Any]:
    rows = [
        _row("demo-0", _device([5, 6, 7], "same"), _device([5, 6, 7], "same")),
        _row("u00-q0", _device([5, 6, 7, 8], "py text"), _device([5, 6, 9, 8], "ts text", rounds=4)),
    ]
    return {
        "command": "python -m bench.sdk_js_live --queries 1",
        "machine": {"platform": "x86_64, 2 CPUs, Linux", "load_average_before": 1.0, "shared": "no"},
        "generalist": "g",
        "cloud_specialist": "s",
        "bundle": "/b",
        "max_new_tokens": 4,
        "params": "defaults",
        "context": {"entries": 3, "chars": 1800},
        "round_timeout_s": 120.0,
        "threads": 2,
        "queries": rows,
        "summary": sdk_js_live.summarize(rows),
    }


def test_compare_finds_the_first_divergence() -> None:
    c = sdk_js_live.compare(_device([1, 2, 3], "x"), _device([1, 2], "y"))
    assert (c["ids_equal"], c["text_equal"], c["prefix"], c["total"]) == (False, False, 2, 3)
    assert c["first_divergence"] == {"index": 2, "python": 3, "typescript": None}
    assert "first_divergence" not in sdk_js_live.compare(_device([1], "x"), _device([1], "x"))


def test_totals_and_page(tmp_path: Path, capsys: Any) -> None:
    result = _result()
    s = result["summary"]
    assert (s["run"], s["ids_equal"], s["text_equal"], s["tokens_agreeing"], s["tokens_total"]) == (2, 1, 1, 5, 7)
    page = sdk_js_live.markdown(result)
    assert "**Texts equal: 1 of 2**" in page
    assert "token 2: Py 7, TS 9" in page
    assert "a \\| subject" in page  # a table cell keeps its pipes escaped
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    assert sdk_js_live.main(["--from-json", str(path)]) == 0
    assert "`PYTHONPATH=. nice -n 5 python -m bench.sdk_js_live --queries 1`" in capsys.readouterr().out


def test_guard_decisions_are_compared_and_counted() -> None:
    guarded = {"prompt_redact": 1, "placeholder": 2}
    py = {**_device([5, 6], "t"), "guard": guarded}
    same, other = {**_device([5, 6], "t"), "guard": dict(guarded)}, {**_device([5, 6], "t"), "guard": {"cut": 1}}
    rows = [_row("demo-0", py, same), _row("u00-q0", {**py, "guard": {"placeholder": 1}}, other)]
    result = {**_result(), "guard": "placeholder", "queries": rows, "summary": sdk_js_live.summarize(rows)}
    s = result["summary"]
    assert (s["guard_equal"], s["guard_decisions"]) == (1, {"placeholder": 3, "prompt_redact": 1})
    page = sdk_js_live.markdown(result)
    assert "guard decisions equal: 1 of 2 (the Python device's, all queries: placeholder 3, prompt_redact 1)" in page
    assert "(guard decisions differ)" in page
    assert "Both devices run the egress guard `sdk generate` runs (`placeholder`)" in page
    assert "Neither device runs an egress guard" in sdk_js_live.markdown(_result())  # a run before --guard
