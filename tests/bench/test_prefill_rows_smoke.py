"""bench.prefill_rows on a tiny model, on both KV engines: both prefills timed and measured, and
the last-row one's distribution is the every-row one's last."""

from __future__ import annotations

import json

import pytest
import torch

from bench import prefill_rows
from specsteer.core.models import load_causal_lm
from tests.tinymodels import save_tiny


def last_distribution(held: object) -> torch.Tensor:
    """The distribution after the prompt, from what a prefill of either engine hands back."""
    if isinstance(held, list):  # the slot pool's kept rows
        return torch.log_softmax(held[0][-1].float(), dim=-1)
    return held.next_logprobs()  # type: ignore[attr-defined]


@pytest.mark.parametrize("kv", prefill_rows.ENGINES)
def test_prefill_rows_smoke_writes_both_kinds_and_they_agree(tmp_path, char_tok, kv: str) -> None:
    # Prepare
    model = save_tiny(tmp_path, char_tok, seed=1, name="s")
    out = tmp_path / "results"
    name = "prefill_rows" if kv == "dynamic" else "prefill_rows_slots"
    # Execute
    assert prefill_rows.main(["--model", str(model), "--kv", kv, "--reps", "1", "--out", str(out)]) == 0
    # Assert
    data = json.loads((out / f"{name}.json").read_text())
    assert data["kv"] == kv
    assert set(data["median_s"]) == set(data["memory_mib"]) == {"last-row", "every-row"}
    assert data["prompt_tokens"] > 100 and all(s > 0 for s in data["median_s"].values())
    assert all(set(m) == {"peak_mib", "held_mib"} for m in data["memory_mib"].values())
    assert "| every-row |" in (out / f"{name}.md").read_text()
    lm = load_causal_lm(model, progress=False)
    ids = list(range(5, 40))
    runs = prefill_rows.prefills(lm, kv, 64)
    last, every = (last_distribution(runs[kind](ids)) for kind in prefill_rows.KINDS)
    torch.testing.assert_close(last, every, atol=1e-5, rtol=0)
