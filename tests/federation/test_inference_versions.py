"""Federated versions reach inference: the verifier's P_S^0 carries the declared global adapter,
the device's Specialist carries global + personal, and a version mismatch is a clear error."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

import specsteer.core.adapters as core_adapters
from specsteer.core.errors import ProtocolError
from specsteer.core.models import load_causal_lm
from specsteer.core.session_types import SessionParams
from specsteer.federation.adapters import apply_adapters, write_adapter
from specsteer.federation.store import load_device_specialist, version_dir
from specsteer.federation.task import GLOBAL, PERSONAL, SpecialistWithAdapters, TaskConfig
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.grpc_server import GlobalAdapters
from specsteer.server.session import CloudVerifier
from specsteer.server.slot_sequence import SlotPools
from tests.tinymodels import tiny_lm

CFG = TaskConfig(lora_rank=2, lora_alpha=4, lora_targets="q_proj,v_proj")
PROMPT = "Write the body of the git commit message whose subject line is below.\n\nSubject: refs: speed up\n\nBody:"


def _adapter(sw: SpecialistWithAdapters, name: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {k: rng.normal(scale=0.3, size=v.shape).astype(np.float32) for k, v in sw.get_adapter(name).items()}
    sw.set_adapter_weights(name, arrays)
    return arrays


@pytest.fixture
def stores(tiny_chat_model: Path, tmp_path: Path):
    # Prepare: global v1 on the server and on the device, a personal adapter on the device only.
    sw = SpecialistWithAdapters(load_causal_lm(str(tiny_chat_model), progress=False), CFG)
    g, p = _adapter(sw, GLOBAL, 1), _adapter(sw, PERSONAL, 2)
    server_adapters, device_state = tmp_path / "server" / "adapters", tmp_path / "device"
    for root in (server_adapters, device_state / GLOBAL):
        write_adapter(version_dir(root, 1), g, sw.lora_config_dict(), kind="global", base=sw.fingerprint, version=1)
    write_adapter(device_state / PERSONAL, p, sw.lora_config_dict(), kind="personal", base=sw.fingerprint)
    return load_causal_lm(str(tiny_chat_model), progress=False), server_adapters, device_state


def test_declared_version_puts_the_global_adapter_into_p_s0(stores, smol_tok) -> None:
    base, server_adapters, device_state = stores
    cloud = CloudVerifier(
        tiny_lm(smol_tok, seed=9), base, seed=0, global_adapters=GlobalAdapters(base, server_adapters)
    )
    device_lm, version = load_device_specialist(base, device_state)
    assert version == 1
    # Execute
    out = generate(
        Specialist(device_lm),
        PROMPT,
        SessionParams(adapter_version=1),
        DecodeOptions(max_new_tokens=6),
        InProcessVerifier(cloud.open, vocab_size=base.vocab_size),
    )
    # Assert: the session ran on the merged copy, which is base + global v1 exactly (no personal).
    assert out.stats.rounds >= 1 and out.stats.fallback is None
    ids = torch.tensor([[5, 17, 300, 42]])
    expected = apply_adapters(base, version_dir(server_adapters, 1), None, expect_version=1)
    with torch.no_grad():
        p_s0 = cloud.specialist_for(1).model(input_ids=ids).logits
        torch.testing.assert_close(p_s0, expected.model(input_ids=ids).logits)
        assert not torch.allclose(p_s0, base.model(input_ids=ids).logits)
        assert not torch.allclose(p_s0, device_lm.model(input_ids=ids).logits)  # the personal part stays home


def test_a_version_the_verifier_lacks_is_a_clear_error(stores, smol_tok) -> None:
    base, server_adapters, _ = stores
    with_store = CloudVerifier(tiny_lm(smol_tok, seed=9), base, global_adapters=GlobalAdapters(base, server_adapters))
    with pytest.raises(ProtocolError, match=r"declares global adapter v2: Global adapter v2 is not in"):
        with_store.open([5, 6, 7], SessionParams(adapter_version=2))
    without = CloudVerifier(tiny_lm(smol_tok, seed=9), base)
    with pytest.raises(ProtocolError, match=r"serves only the base Specialist \(v0\)"):
        without.open([5, 6, 7], SessionParams(adapter_version=1))


def test_sdk_generate_with_a_federation_state_declares_its_version(stores, tiny_chat_model, capsys, tmp_path) -> None:
    from specsteer.sdk.cli import main

    _, _, device_state = stores
    args = [
        "generate",
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "4",
        "--json",
        "--specialist",
        str(tiny_chat_model),
        "--generalist",
        str(tiny_chat_model),
    ]
    assert main([*args, "--federation-state", str(device_state)]) == 0
    assert '"new_tokens"' in capsys.readouterr().out
    assert main([*args, "--federation-state", str(tmp_path / "nowhere")]) == 1
    assert "federation state folder" in capsys.readouterr().err


def test_an_evicted_adapter_version_gives_back_its_slot_pool_and_model(stores, smol_tok, tiny_chat_model) -> None:
    """With the slot pool, each global adapter version's merged copy gets a KV pool of its own (on
    a GPU, gigabytes). When the verifier lets a version go (it keeps the most recent few), the pool
    goes with it, and the copy is freed once no session is on it: a federation publishing versions
    for weeks must not pile them up."""
    base, server_adapters, _ = stores
    pools = SlotPools(2, 256)
    adapters = GlobalAdapters(base, server_adapters, keep=1, evicted=pools.drop)
    cloud = CloudVerifier(tiny_lm(smol_tok, seed=9), base, seed=0, global_adapters=adapters, kv_slots=pools)
    prompt = base.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    cloud.open(prompt, SessionParams(adapter_version=1)).close()
    first = weakref.ref(cloud.specialist_for(1).model)
    assert any(pool.model is first() for pool in pools.pools())
    _publish(server_adapters, tiny_chat_model, 2)  # the federation's next round
    cloud.open(prompt, SessionParams(adapter_version=2)).close()  # v1 is let go: keep=1
    assert all(pool.model is not first() for pool in pools.pools())
    gc.collect()
    assert first() is None  # nothing holds v1's merged copy any more
    assert any(pool.model is cloud.specialist_for(2).model for pool in pools.pools())


def _publish(server_adapters: Path, model: Path, version: int) -> None:
    sw = SpecialistWithAdapters(load_causal_lm(str(model), progress=False), CFG)
    arrays = _adapter(sw, GLOBAL, version + 1)
    write_adapter(
        version_dir(server_adapters, version),
        arrays,
        sw.lora_config_dict(),
        kind="global",
        base=sw.fingerprint,
        version=version,
    )


def test_a_device_cycling_adapter_versions_makes_no_merge_per_open(
    stores, smol_tok, tiny_chat_model, monkeypatch
) -> None:
    """Each Open of a version not merged merges the Specialist (seconds on a real model, under the
    lock every Open takes). Only the newest `keep` versions are served, and each is merged once, so
    cycling versions cannot make the verifier merge again and again."""
    base, server_adapters, _ = stores
    for version in (2, 3):
        _publish(server_adapters, tiny_chat_model, version)
    merges: list[int] = []
    merge = core_adapters.apply_adapters

    def counted(base_lm, global_dir, *args, expect_version=None, **kwargs):
        merges.append(expect_version)
        return merge(base_lm, global_dir, *args, expect_version=expect_version, **kwargs)

    monkeypatch.setattr(core_adapters, "apply_adapters", counted)
    cloud = CloudVerifier(
        tiny_lm(smol_tok, seed=9), base, global_adapters=GlobalAdapters(base, server_adapters, keep=2)
    )
    with pytest.raises(ProtocolError, match=r"global adapter v1 is retired: this verifier serves v2\.\.v3"):
        cloud.open([5, 6, 7], SessionParams(adapter_version=1))
    for version in (2, 3, 2, 3, 3, 2):
        cloud.open([5, 6, 7], SessionParams(adapter_version=version)).close()
    assert sorted(merges) == [2, 3]
