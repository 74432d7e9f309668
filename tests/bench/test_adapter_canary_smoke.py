"""The adapter canary benchmark's smoke run: real federated rounds with and without DP on a tiny
model, every secret of a small space scored with the base model and both global adapters."""

from __future__ import annotations

import json
from pathlib import Path

from bench import adapter_canary
from specsteer.privacy.data import read_canaries
from tests.tinymodels import save_tiny

FIXTURES = Path(__file__).parents[1] / "fixtures" / "users.jsonl"


def test_adapter_canary_smoke_writes_exposures_and_the_ledgers_epsilon(tmp_path, bpe_tok) -> None:
    # Prepare: the fixture BPE spends ~130 tokens on the prompt, hence 256-token sequences.
    model = save_tiny(tmp_path, bpe_tok, seed=3, name="tiny-bpe", hidden=32, heads=2)
    out, work = tmp_path / "results", tmp_path / "work"
    args = ["--model", str(model), "--data", str(FIXTURES), "--users", "2", "--planted", "1", "--history", "10"]
    args += ["--repetitions", "2", "--rounds", "1", "--dp-steps", "2", "--max-len", "256", "--secret-length", "3"]
    args += ["--controls", "5", "--lora-rank", "2", "--out", str(out), "--work", str(work), "--name", "smoke"]
    # Execute
    assert adapter_canary.main(args) == 0
    # Assert: both runs trained a new version; every model ranked each canary among all 1,000.
    result = json.loads((out / "smoke.json").read_text())
    assert result["command"].startswith("python -m bench.adapter_canary --model")
    assert set(result["runs"]) == {"no-dp", "dp"} and set(result["models"]) == {"base", "no-dp", "dp"}
    assert result["runs"]["no-dp"]["version"] == 1 and result["runs"]["dp"]["version"] == 1
    assert result["canary"]["size"] == 1000
    for m in result["models"].values():
        assert len(m["planted"]) == 1 and len(m["controls"]) == 5 and m["controls_summary"]["count"] == 5
        for e in [*m["planted"], *m["controls"]]:
            assert 1 <= e["rank"] <= 1000 and 0.0 <= e["exposure"] <= result["canary"]["bits"] + 1e-9
            assert "secret" not in e  # the report never holds a secret
    # The DP run's ε comes from the devices' ledgers; the no-DP run has none.
    dp_devices = result["runs"]["dp"]["devices"]
    assert [d["user"] for d in dp_devices] == ["u04", "u09"]
    assert all(d["epsilon"] > 0 and d["delta"] == 1e-5 for d in dp_devices)
    assert all(d["held_out_loss"] > 0 for r in result["runs"].values() for d in r["devices"])
    assert all("epsilon" not in d for d in result["runs"]["no-dp"]["devices"])
    assert result["planted"][0]["user"] == "u04" and set(result["planted"][0]["exposure"]) == {"base", "no-dp", "dp"}
    table = (out / "smoke.md").read_text()
    assert "planted 1 | u04 | 2 |" in table and "controls (5): median" in table and "ε = u04" in table
    assert "held-out loss with the global adapter: u04" in table
    # The secrets stay in the work folder, in privacy.data's canary format.
    space, canaries = read_canaries(work / "canaries.json")
    assert space.size == 1000 and [c.user_id for c in canaries] == ["u04"]
