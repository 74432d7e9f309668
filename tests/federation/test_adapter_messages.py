"""What a device keeps of a server's message: LoRA matrices of its own base, at a bounded version.

The global adapter is what the device's inference runs with, so a message may change it by a
low-rank delta and nothing more. Before: LoRA targets naming the LM head made peft ship the full
base matrix (one evaluate message replaced the device's LM head); a message of another base at
version 2^31-1 was stored before the mismatch was noticed, and the device's inference could never
load its federation state again. Each test sends real messages to the real ClientApp.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specsteer.core.models import load_causal_lm
from specsteer.core.session_types import MAX_ADAPTER_VERSION
from specsteer.federation.adapters import write_adapter
from specsteer.federation.errors import MessageRefusal
from specsteer.federation.store import AdapterStore, load_device_specialist
from specsteer.federation.task import GLOBAL, PERSONAL, TaskConfig, specialist_for
from tests.federation.conftest import deliver, node_configs, run_config, train_content, v0_arrays


def _kept(state: Path) -> list[int]:
    return AdapterStore(state / GLOBAL).versions()


def test_an_adapter_is_lora_matrices_only_even_on_the_lm_head(tiny_bpe_model: Path, tmp_path: Path) -> None:
    # The device's operator allows the LM head as a LoRA target; the server still ships only deltas.
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1, **{"lora-targets": "q_proj,lm_head"})
    config = run_config(tiny_bpe_model, tmp_path, **{"lora-targets": "q_proj,lm_head"})
    arrays, base = v0_arrays(config)
    assert arrays and all(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in arrays)
    # What the attack sent: the full LM-head matrix, one row made to win every position.
    head = load_causal_lm(str(tiny_bpe_model), progress=False).model.lm_head.weight.detach().numpy()
    evil = {**arrays, "base_model.model.lm_head.base_layer.weight": np.zeros_like(head)}
    evil["base_model.model.lm_head.base_layer.weight"][42] = 50.0
    for kind in ("evaluate", "train"):
        reply = deliver(train_content(evil, **{"adapter-version": 1, "base-fingerprint": base}), kind, node, config)
        assert reply.has_error() and reply.error.reason == MessageRefusal.public
    assert _kept(tmp_path / "device0") == []
    # The honest message of the same run is taken, and what the device keeps is the deltas alone.
    reply = deliver(train_content(arrays, **{"adapter-version": 1, "base-fingerprint": base}), "evaluate", node, config)
    assert not reply.has_error(), reply.error
    assert _kept(tmp_path / "device0") == [1]
    lm, version = load_device_specialist(load_causal_lm(str(tiny_bpe_model), progress=False), tmp_path / "device0")
    assert version == 1 and np.array_equal(lm.model.lm_head.weight.detach().numpy(), head)


def test_arrays_for_another_base_are_refused_before_anything_is_kept(tiny_bpe_model: Path, tmp_path: Path) -> None:
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    config = run_config(tiny_bpe_model, tmp_path)
    arrays, base = v0_arrays(config)
    for kind in ("evaluate", "train"):
        content = train_content(arrays, **{"adapter-version": 5, "base-fingerprint": "0" * 16})
        reply = deliver(content, kind, node, config)
        assert reply.has_error() and reply.error.reason == MessageRefusal.public
    assert _kept(tmp_path / "device0") == [] and not (tmp_path / "device0" / "ledger.json").exists()
    # A server that sends no fingerprint (an older one) is still served; its own is checked.
    assert not deliver(train_content(arrays, **{"adapter-version": 1}), "evaluate", node, config).has_error()
    reply = deliver(train_content(arrays, **{"adapter-version": 2, "base-fingerprint": base}), "evaluate", node, config)
    assert not reply.has_error() and _kept(tmp_path / "device0") == [1, 2]


def test_a_personal_adapter_of_another_base_stops_the_round_before_the_version_is_kept(
    tiny_bpe_model: Path, tmp_path: Path
) -> None:
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    config = run_config(tiny_bpe_model, tmp_path)
    arrays, base = v0_arrays(config)
    sw = specialist_for(TaskConfig.from_run_config(config))
    personal = {k: np.zeros_like(v) for k, v in sw.get_adapter(PERSONAL).items()}
    write_adapter(tmp_path / "device0" / PERSONAL, personal, sw.lora_config_dict(), kind=PERSONAL, base="f" * 16)
    reply = deliver(train_content(arrays, **{"adapter-version": 1, "base-fingerprint": base}), "evaluate", node, config)
    assert reply.has_error()
    assert _kept(tmp_path / "device0") == []  # before: v1 was kept first, then the mismatch noticed


@pytest.mark.parametrize(("jump", "taken"), [(1000, True), (1001, False), (MAX_ADAPTER_VERSION - 1, False)])
def test_a_version_may_not_jump_far_past_the_devices_newest(
    tiny_bpe_model: Path, tmp_path: Path, jump: int, taken: bool
) -> None:
    (node,) = node_configs(tiny_bpe_model, tmp_path, 1)
    config = run_config(tiny_bpe_model, tmp_path)
    arrays, _ = v0_arrays(config)
    assert not deliver(train_content(arrays, **{"adapter-version": 1}), "evaluate", node, config).has_error()
    for kind in ("evaluate", "train"):
        reply = deliver(train_content(arrays, **{"adapter-version": 1 + jump}), kind, node, config)
        assert reply.has_error() != taken, reply.error if reply.has_error() else None
        if not taken:
            assert reply.error.reason == MessageRefusal.public
    assert _kept(tmp_path / "device0") == ([1, 1 + jump] if taken else [1])
    _, version = load_device_specialist(load_causal_lm(str(tiny_bpe_model), progress=False), tmp_path / "device0")
    assert version == (1 + jump if taken else 1)
