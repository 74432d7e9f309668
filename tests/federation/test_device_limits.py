"""What a run may ask of a device: the device's own limits, checked before anything is loaded.

A server sets the run config. Before these limits it chose the device's model (any name or path,
converted on the device), the LoRA rank (10^6 grew the device's memory by gigabytes before the
shape check), LoRA on the embeddings or the LM head, the batch size, the holdout (0 trained on the
entries kept for evaluation) and the personal learning rate (1000 ruined the personal adapter,
which has no copy anywhere else). Each test sends real messages to the real ClientApp.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import PreTrainedTokenizerFast

import specsteer.federation.participant
import specsteer.federation.task
from specsteer.federation.adapters import ADAPTER_WEIGHTS
from specsteer.federation.errors import RunConfigRefusal
from specsteer.federation.participant import Device
from specsteer.federation.task import PERSONAL, load_user, split_profile
from tests.federation.conftest import FIXTURE_USERS, deliver, node_configs, run_config, train_content, v0_arrays
from tests.tinymodels import save_tiny


def _v0(config: dict[str, Any]) -> dict[str, np.ndarray]:
    """The global adapter v0 of a run (what the server would send)."""
    return v0_arrays(config)[0]


def _log(state: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (state / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "overrides",
    [
        {"lora-rank": 4096},
        {"lora-targets": "q_proj,lm_head"},
        {"lora-targets": "q_proj,embed_tokens"},
        {"batch-size": 1000},
        {"lr": 0.0},
        {"lr": math.nan},
        {"personal-lr": 1000.0},
    ],
    ids=["rank", "lm_head", "embed_tokens", "batch", "lr0", "lr-nan", "personal-lr"],
)
def test_a_run_beyond_the_devices_limits_is_refused_before_anything_loads(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any]
) -> None:
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    arrays = _v0(run_config(tiny_bpe_model, tmp_path))

    def no_loading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the device loaded a model for a run it must refuse")

    monkeypatch.setattr(specsteer.federation.task, "load_causal_lm", no_loading)
    monkeypatch.setattr(specsteer.federation.task, "_MODELS", {})  # nothing cached: any use would load
    for kind in ("train", "evaluate"):
        reply = deliver(train_content(arrays), kind, node, run_config(tiny_bpe_model, tmp_path, **overrides))
        assert reply.has_error() and reply.error.reason == RunConfigRefusal.public, reply.error.reason
    # Nothing trained, spent or kept; the detail is in the device's own log.
    assert sorted(p.name for p in (tmp_path / "device0").iterdir()) == ["rounds.jsonl"]
    assert {r["event"] for r in _log(tmp_path / "device0")} == {"refused"}


def test_the_device_trains_only_the_model_its_node_config_names(
    tiny_bpe_model: Path, tmp_path: Path, bpe_tok: PreTrainedTokenizerFast
) -> None:
    """A run naming another model (any name or path) made the device load or convert it."""
    other = save_tiny(tmp_path / "models", bpe_tok, seed=99, name="other", hidden=32, heads=2)
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    foreign = run_config(other, tmp_path)
    reply = deliver(train_content(_v0(foreign)), "train", node, foreign)
    assert reply.has_error() and reply.error.reason == RunConfigRefusal.public
    assert not (tmp_path / "device0" / "ledger.json").exists()
    # A node config that names no model trains the embedded Specialist only.
    unpinned = {k: v for k, v in node.items() if k != "model"}
    with pytest.raises(RunConfigRefusal):
        Device.from_configs(unpinned, foreign)
    assert Device.from_configs(node, run_config(tiny_bpe_model, tmp_path)).cfg.model == str(tiny_bpe_model)


def test_what_costs_only_the_device_is_cut_to_its_limits(tmp_path: Path) -> None:
    node = {"data-file": str(FIXTURE_USERS), "state-dir": str(tmp_path / "d")}
    greedy = {"context-entries": 10**6, "context-chars": 10**9, "personal-lr": 5.0, "holdout": 0}
    cfg = Device.from_configs(node, greedy).cfg
    assert (cfg.context_entries, cfg.context_chars, cfg.personal_lr, cfg.holdout) == (8, 1800, 0.01, 4)
    own = {**node, "max-context-entries": 2, "max-context-chars": 100, "max-personal-lr": 0.5, "min-holdout": 6}
    cfg = Device.from_configs(own, greedy).cfg
    assert (cfg.context_entries, cfg.context_chars, cfg.personal_lr, cfg.holdout) == (2, 100, 0.5, 6)
    modest = {"context-entries": 1, "context-chars": 50, "personal-lr": 0.001, "holdout": 9}
    cfg = Device.from_configs(node, modest).cfg
    assert (cfg.context_entries, cfg.context_chars, cfg.personal_lr, cfg.holdout) == (1, 50, 0.001, 9)


def test_a_run_asking_holdout_0_still_never_trains_on_the_newest_entries(tiny_bpe_model: Path, tmp_path: Path) -> None:
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    config = run_config(tiny_bpe_model, tmp_path, holdout=0)
    reply = deliver(train_content(_v0(config)), "train", node, config)
    assert not reply.has_error(), reply.error
    train, held = split_profile(load_user(FIXTURE_USERS, index=0).profile, 4)
    assert len(held) == 4
    (trained,) = [r for r in _log(tmp_path / "device0") if r["event"] == "train"]
    assert trained["examples"] == len(train)  # 21 of 25: the newest 4 stay out


def test_a_diverged_personal_adapter_is_not_kept_and_the_round_goes_on(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether personal training diverges depends on the history: a refusal would tell the server."""
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    config = run_config(tiny_bpe_model, tmp_path)
    arrays = _v0(config)
    assert not deliver(train_content(arrays), "train", node, config).has_error()
    weights = tmp_path / "device0" / PERSONAL / ADAPTER_WEIGHTS
    kept = weights.read_bytes()
    real = specsteer.federation.participant.train_personal

    def diverging(sw: Any, *args: Any, **kwargs: Any) -> float:
        loss = real(sw, *args, **kwargs)
        with torch.no_grad():
            for name, param in sw.peft.named_parameters():
                if f".{PERSONAL}." in name:
                    param.fill_(math.inf)
        return loss

    monkeypatch.setattr(specsteer.federation.participant, "train_personal", diverging)
    reply = deliver(train_content(arrays, **{"server-round": 2}), "train", node, config)
    assert not reply.has_error(), reply.error
    assert all(np.isfinite(a.numpy()).all() for a in reply.content["arrays"].values())
    assert weights.read_bytes() == kept
    assert [r.get("personal_kept") for r in _log(tmp_path / "device0") if r["event"] == "train"] == [True, False]
