"""bench.prefill_rows on a tiny model: both prefills timed and measured, and the last-row one's
distribution is the every-row one's last."""

from __future__ import annotations

import json

import torch

from bench import prefill_rows
from core.models import load_causal_lm
from tests.tinymodels import save_tiny


def test_prefill_rows_smoke_writes_both_kinds_and_they_agree(tmp_path, char_tok) -> None:
    # Prepare
    model = save_tiny(tmp_path, char_tok, seed=1, name="s")
    out = tmp_path / "results"
    # Execute
    assert prefill_rows.main(["--model", str(model), "--reps", "1", "--out", str(out)]) == 0
    # Assert
    data = json.loads((out / "prefill_rows.json").read_text())
    assert set(data["median_s"]) == set(data["memory_mib"]) == {"last-row", "every-row"}
    assert data["prompt_tokens"] > 100 and all(s > 0 for s in data["median_s"].values())
    assert all(set(m) == {"peak_mib", "held_mib"} for m in data["memory_mib"].values())
    assert "| every-row |" in (out / "prefill_rows.md").read_text()
    lm = load_causal_lm(model, progress=False)
    ids = list(range(5, 40))
    last, every = (kind(lm.model, ids) for kind in prefill_rows.KINDS.values())
    torch.testing.assert_close(last.next_logprobs(), every.next_logprobs(), atol=1e-5, rtol=0)
