"""Secret Sharer against the released global adapter: real federated rounds (the ServerApp and
ClientApps through `run_in_process`, real Opacus DP-SGD) on histories with a planted canary, then
the exact exposure of the canary in base + the last global adapter, against control canaries.

Settings (tiny BPE Llama, rank-8 LoRA on every linear layer, 3 rounds of 40 steps at lr 0.05, a
5-digit canary in 8 copies among 8 trained commits on one of two devices) were chosen so that
without DP the canary ranked in the top 6 of 100,000 in each of 14 trial runs (14.0-16.6 bits), and
with DP at noise multiplier 100 like a secret the model never saw in each of 13 (0.2-3.3 bits).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from specsteer.core.models import load_causal_lm
from specsteer.federation.simulation import run_in_process
from specsteer.federation.task import TaskConfig, build_examples
from specsteer.privacy.accounting import epsilon_of, read_ledger_file
from specsteer.privacy.adapter_exposure import (
    CanaryRecord,
    adapter_model,
    canary_prompt_ids,
    model_exposures,
    plant_canary_records,
)
from specsteer.privacy.leakage import CanarySpace
from specsteer.sdk.context import ProfileEntry
from tests.federation.conftest import FIXTURE_USERS, run_config

RECORD = CanaryRecord(CanarySpace(length=5))
LORA = {"lora-rank": 8, "lora-alpha": 16, "lora-targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"}


def test_the_canary_prompt_is_the_global_adapters_training_prompt(tiny_chat_model: Path) -> None:
    # The exposure scores a body after exactly the tokens DP-SGD trained it behind.
    lm = load_causal_lm(str(tiny_chat_model), progress=False)
    entry = ProfileEntry(subject=RECORD.subject, body=RECORD.space.render("04817"))
    (example,) = build_examples(lm, [entry], (), TaskConfig(max_len=256))
    prompt = canary_prompt_ids(lm, RECORD.subject)
    assert list(example.input_ids[: example.target_start]) == prompt
    body = list(example.input_ids[example.target_start :])
    assert body[:-1] == lm.tokenizer.encode(entry.body, add_special_tokens=False)  # then the end token


def _planted_run(model: Path, tmp: Path, *, dp: bool, **overrides: Any) -> tuple[float, list[float], Path]:
    """Train on two devices (a canary planted on the first), then score; (planted, controls, state)."""
    rng = np.random.default_rng()
    secret, *controls = RECORD.space.sample(rng, 21)
    users = [json.loads(line) for line in FIXTURE_USERS.read_text().splitlines()][:2]
    users = [{**u, "profile": u["profile"][-12:]} for u in users]  # 8 trained + 4 held out
    users[0] = plant_canary_records(users[0], RECORD, secret, 8, random.Random(0), keep_last=4)
    data = tmp / "data.jsonl"
    data.write_text("".join(json.dumps(u) + "\n" for u in users))
    config = run_config(
        model,
        tmp,
        **{"num-server-rounds": 3, "dp-steps": 40, "lr": 0.05, "personal-steps": 0, "dp": dp, **LORA, **overrides},
    )
    policy = {} if dp else {"dp-required": False}  # the operator's own simulated devices allow --no-dp
    nodes = [
        {"data-file": str(data), "partition-id": i, "state-dir": str(tmp / f"device{i}"), "model": str(model), **policy}
        for i in (0, 1)
    ]
    summary, _ = run_in_process(config, nodes)
    assert summary["version_out"] == 3 and all(r["replies"] == 2 for r in summary["rounds"])
    lm = adapter_model(load_causal_lm(str(model), progress=False), tmp / "server" / "adapters", 3)
    planted, *rest = model_exposures(lm, RECORD, [secret, *controls])
    return planted.exposure, [e.exposure for e in rest], tmp


def test_without_dp_the_global_adapter_exposes_the_planted_canary(tiny_bpe_model: Path, tmp_path: Path) -> None:
    planted, controls, _ = _planted_run(tiny_bpe_model, tmp_path, dp=False)
    # Rank <= 25 of 100,000 (max 16.61 bits); 20 secrets the model never saw average ~1.44 bits.
    assert planted >= 12.0, (planted, controls)
    assert float(np.median(controls)) <= 3.0 and float(np.mean(controls)) <= 3.5, controls
    assert planted - float(np.median(controls)) >= 9.0


def test_with_large_dp_noise_the_planted_canary_stays_near_the_controls(tiny_bpe_model: Path, tmp_path: Path) -> None:
    planted, controls, state = _planted_run(tiny_bpe_model, tmp_path, dp=True, **{"noise-multiplier": 100.0})
    # A secret the model knows nothing about reaches 10 bits with probability 2^-10.
    assert planted <= 10.0, (planted, controls)
    assert float(np.mean(controls)) <= 3.5, controls
    # ... next to the ε the device's ledger claims for that run (commit-level; 8 copies are a group).
    ledger = read_ledger_file(state / "device0" / "ledger.json")
    assert ledger is not None and len(ledger.history) == 3
    assert 0.0 < epsilon_of(ledger.history, ledger.delta, ledger.accountant) < 0.5
