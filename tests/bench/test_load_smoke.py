"""The load benchmark's smoke run: a real `server serve` process per batching mode, concurrent
sessions, tiny models."""

from __future__ import annotations

import json

from bench import load
from tests.tinymodels import save_tiny


def test_load_smoke_runs_concurrent_sessions_without_errors(tmp_path, char_tok) -> None:
    # Prepare
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = [
        "--sessions",
        "1",
        "3",
        "--max-new-tokens",
        "4",
        "--specialist",
        str(s_dir),
        "--generalist",
        str(g_dir),
        "--out",
        str(out),
    ]
    # Execute
    assert load.main(args) == 0
    # Assert: both modes at both N (batching on and off is the default), in one table.
    result = json.loads((out / "load.json").read_text())
    rows = result["rows"]
    assert [(r["sessions"], r["batching"]) for r in rows] == [(1, "off"), (1, "on"), (3, "off"), (3, "on")]
    assert all(r["errors"] == 0 and r["rounds"] >= r["sessions"] for r in rows)
    assert all(r["verifier_peak_rss_mb"] > 0 and r["round_p99_ms"] >= r["round_p50_ms"] for r in rows)
    # The server's own metrics: every forward ran alone with batching off; never above max-batch with it on.
    assert all(r["forwards"] > 0 and r["unmerged_forwards"] == 0 for r in rows)
    assert all(r["mean_batch_size"] == 1.0 for r in rows if r["batching"] == "off")
    assert all(1.0 <= r["mean_batch_size"] <= 8 for r in rows if r["batching"] == "on")
    assert set(result["meta"]["verifier_idle_rss_mb"]) == {"on", "off"}
    assert "| 3 | on |" in (out / "load.md").read_text()
    assert (out / "load.png").stat().st_size > 1000


def test_the_verifiers_placement_and_kv_engine_reach_server_serve() -> None:
    """`--cloud-device/--cloud-dtype/--kv slots/--kv-compile` become `server serve` options, which
    the server's own tests cover (the slot pool live over mutual TLS: tests/server/test_slot_engine.py)."""
    from specsteer.server.cli import build_parser

    def options(*argv: str) -> list[str]:
        args = load.build_parser().parse_args(["--sessions", "1", "3", *argv])
        return load.verifier_options(args, "on", 9999)

    plain = options()
    assert plain[plain.index("--kv") + 1] == "dynamic" and "--kv-slots" not in plain
    slots = options("--cloud-device", "cuda", "--cloud-dtype", "bfloat16", "--kv", "slots", "--kv-compile")
    served = build_parser().parse_args(["serve", *slots])
    assert (served.device, served.dtype, served.kv, served.kv_slots, served.kv_compile) == (
        "cuda",
        "bfloat16",
        "slots",
        4,  # the largest N and the warm-up session
        True,
    )
