"""The speed benchmark's smoke run: a real TLS verifier on loopback, two RTTs, tiny models."""

from __future__ import annotations

import json

from bench import speed
from tests.tinymodels import save_tiny


def test_speed_smoke_has_every_rtt_and_method(tmp_path, char_tok) -> None:
    # Prepare
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = [
        "--rtts",
        "0",
        "10",
        "--queries",
        "1",
        "--max-new-tokens",
        "5",
        "--specialist",
        str(s_dir),
        "--generalist",
        str(g_dir),
        "--out",
        str(out),
    ]
    # Execute
    assert speed.main(args) == 0
    # Assert
    rows = json.loads((out / "speed.json").read_text())["rows"]
    methods = {r["method"] for r in rows}
    assert methods == {"llm (in cloud)", "fusion", "sd (K=4)", "specsteer gamma=0.5", "specsteer gamma=0.1"}
    assert {r["rtt_ms"] for r in rows} == {0.0, 10.0}
    assert all(r["fallbacks"] == 0 for r in rows)
    steered = [r for r in rows if r["method"].startswith("specsteer")]
    assert all(
        r["analytic_bound_vs_llm"] > 0 and r["wire_bytes_per_token"] > r["uplink_bytes_per_token"] for r in steered
    )
    assert (out / "speed.png").stat().st_size > 1000 and "projection" in (out / "speed.md").read_text()
