"""The federation cost benchmark's smoke run: real Flower rounds with and without DP, tiny model."""

from __future__ import annotations

import json
from pathlib import Path

from bench import federation_cost
from specsteer.federation.cli import build_parser, run_options
from specsteer.federation.task import step_rows
from tests.tinymodels import save_tiny

FIXTURES = Path(__file__).parents[1] / "fixtures" / "users.jsonl"


def test_federation_cost_smoke_reports_dp_against_sgd(tmp_path, bpe_tok) -> None:
    # Prepare: the fixture BPE spends ~130 tokens on the prompt, hence 256-token sequences.
    model = save_tiny(tmp_path, bpe_tok, seed=3, name="tiny-bpe", hidden=32, heads=2)
    out = tmp_path / "results"
    args = ["--limit", "--data", str(FIXTURES), "--model", str(model), "--max-len", "256", "--out", str(out)]
    # Execute
    assert federation_cost.main(args) == 0
    # Assert: one row per configuration, every device trained, sane numbers.
    result = json.loads((out / "federation_cost_smoke.json").read_text())
    cases = {c["id"]: c for c in result["cases"]}
    assert list(cases) == ["sgd", "dp", "dp-secagg"]
    # The command line each case records asks `federation run` for the run config it measured.
    for case in cases.values():
        assert run_options(build_parser().parse_args(case["argv"])).run_config() == case["run_config"]
    assert cases["dp"]["dp"] and not cases["sgd"]["dp"] and cases["dp-secagg"]["secagg"]
    for case in cases.values():
        (rnd,) = case["rounds"]
        assert rnd["replies"] == 3 and len(rnd["clients"]) == 3
        assert rnd["wall_seconds"] > 0 and rnd["cpu_seconds"] > 0 and rnd["peak_rss_mb"] >= rnd["rss_before_mb"] > 0
        for client in rnd["clients"]:
            assert client["train_seconds"] > client["global_seconds"] > 0
            assert client["uplink_bytes"] > 0 and client["downlink_bytes"] > 0
            if case["dp"]:
                assert client["epsilon"] > 0
            else:
                # One step of batch 4, padded to the public row count every step runs (issue #50, finding 4).
                rows = step_rows(4)
                assert client["epsilon"] is None and client["global_sequences"] == client["global_max_batch"] == rows
    ratios = result["ratios"]
    assert set(ratios) == {"dp", "dp-secagg"}
    assert all(v is not None and v > 0 for r in ratios.values() for v in r["overall"].values())
    table = (out / "federation_cost_smoke.md").read_text()
    assert "DP-SGD + SecAgg+" in table and "no DP (SGD)" in table and "ε after" in table
    assert (out / "federation_cost_smoke.png").stat().st_size > 1000
