"""The training task and the adapters, on a tiny model with SmolLM2's real tokenizer and chat template."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from specsteer.core.errors import ConfigError
from specsteer.core.models import load_causal_lm
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.federation.adapters import AdapterError, apply_adapters, write_adapter
from specsteer.federation.budget_ledger import Ledger
from specsteer.federation.client_app import _unpack
from specsteer.federation.errors import MessageRefusal
from specsteer.federation.simulation import _server_identity
from specsteer.federation.task import (
    GLOBAL,
    PERSONAL,
    SpecialistWithAdapters,
    TaskConfig,
    build_examples,
    load_user,
    noise_only_update,
    per_sequence_loss,
    split_profile,
    to_dataset,
    train_global_dp,
    train_personal,
)
from specsteer.sdk.context import ProfileIndex, fit_context
from tests.federation.conftest import FIXTURE_USERS
from tests.tinymodels import save_tiny

CFG = TaskConfig(
    max_len=320,
    context_chars=300,
    lora_rank=2,
    lora_alpha=4,
    lora_targets="q_proj,v_proj",
    dp_steps=2,
    personal_steps=2,
)


def _specialist(model: Path, cfg: TaskConfig = CFG) -> SpecialistWithAdapters:
    return SpecialistWithAdapters(load_causal_lm(str(model), progress=False), cfg)


def test_training_sequences_are_the_inference_prompt_then_the_body(tiny_chat_model: Path) -> None:
    sw = _specialist(tiny_chat_model)
    data = load_user(FIXTURE_USERS, user_id="u09")
    train, held = split_profile(data.profile, CFG.holdout)
    assert len(held) == CFG.holdout and held == list(data.profile.entries[-CFG.holdout :])
    examples = build_examples(sw.lm, train, train, CFG)
    assert len(examples) == len(train)

    with_context = 0
    index = ProfileIndex(type(data.profile)(None, tuple(train)))
    for entry, ex in zip(train, examples, strict=True):
        prompt_ids = list(ex.input_ids[: ex.target_start])
        body_ids = list(ex.input_ids[ex.target_start :])
        # The prompt is exactly what slm-rag inference renders, for a context of at most context_chars.
        candidates = [e for e in index.retrieve(task_prompt(entry.subject), CFG.context_entries + 1) if e != entry]
        renders = [render_prompt(sw.lm, task_prompt(entry.subject))]
        chars = CFG.context_chars
        while chars >= 40:
            renders.append(
                render_prompt(
                    sw.lm,
                    task_prompt(entry.subject),
                    fit_context(candidates[: CFG.context_entries], max_chars=chars),
                )
            )
            chars //= 2
        assert prompt_ids in renders
        with_context += prompt_ids != renders[0]
        # The entry itself is never in its own context (that would teach copying the answer).
        # (the prompt asks about the subject once itself; the entry as an example would add a second).
        assert sw.lm.tokenizer.decode(prompt_ids).count(task_prompt(entry.subject)) == 1
        expected_body = sw.lm.tokenizer.encode(entry.body.strip(), add_special_tokens=False)
        if body_ids[-1] == sw.lm.tokenizer.eos_token_id:
            assert body_ids[:-1] == expected_body
        else:
            assert body_ids == expected_body[: len(body_ids)]
        assert len(ex.input_ids) <= CFG.max_len
    assert with_context > len(train) // 2


def test_per_sequence_loss_ignores_batch_partners_and_padding(tiny_chat_model: Path) -> None:
    sw = _specialist(tiny_chat_model)
    data = load_user(FIXTURE_USERS, index=0)
    examples = build_examples(sw.lm, list(data.profile.entries[:3]), [], CFG)
    ds = to_dataset(examples, pad_id=sw.lm.tokenizer.pad_token_id or 0, max_len=CFG.max_len)
    with torch.no_grad():
        together = per_sequence_loss(sw.peft, *ds[0:3])
        alone = torch.cat([per_sequence_loss(sw.peft, *ds[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)


def test_dp_trains_only_global_and_personal_only_personal(tiny_chat_model: Path, tmp_path: Path) -> None:
    sw = _specialist(tiny_chat_model)
    data = load_user(FIXTURE_USERS, index=1)
    train, _ = split_profile(data.profile, CFG.holdout)
    ds = to_dataset(build_examples(sw.lm, train, train, CFG), pad_id=0, max_len=CFG.max_len)
    ledger = Ledger.load(tmp_path / "ledger.json", epsilon_budget=50.0, delta=1e-5)

    g0, p0 = sw.get_adapter(GLOBAL), sw.get_adapter(PERSONAL)
    result = train_global_dp(sw, ds, CFG, ledger, server_round=1)
    g1, p1 = sw.get_adapter(GLOBAL), sw.get_adapter(PERSONAL)
    assert result.update_norm > 0  # the Opacus/peft "adapters never move" snag would give 0
    assert any(np.abs(g1[k] - g0[k]).sum() > 0 for k in g0 if "lora_B" in k)
    assert all(np.array_equal(p0[k], p1[k]) for k in p0)
    assert len(ledger.rounds) == 1 and ledger.rounds[0].steps == CFG.dp_steps
    assert result.epsilon == pytest.approx(ledger.epsilon_spent) and result.accountant == "rdp"
    # Opacus's hooks are gone afterwards: a plain forward/backward leaves no per-sample gradients.
    assert not any(hasattr(p, "grad_sample") and p.grad_sample is not None for p in sw.peft.parameters())

    train_personal(sw, ds, CFG, seed=1)
    g2, p2 = sw.get_adapter(GLOBAL), sw.get_adapter(PERSONAL)
    assert all(np.array_equal(g1[k], g2[k]) for k in g1)
    assert any(np.abs(p2[k] - p1[k]).sum() > 0 for k in p1)


def test_adapter_arrays_that_are_not_finite_are_refused(tiny_chat_model: Path) -> None:
    """A server's NaN global adapter trained into the personal one, which the device then saved."""
    sw = _specialist(tiny_chat_model)
    arrays = {k: np.full_like(v, np.nan) for k, v in sw.get_adapter(GLOBAL).items()}
    before = sw.get_adapter(GLOBAL)
    with pytest.raises(ConfigError, match="holds values that are not finite numbers"):
        sw.set_adapter_weights(GLOBAL, arrays)
    assert all(np.array_equal(before[k], v) for k, v in sw.get_adapter(GLOBAL).items())


def _random_adapter(sw: SpecialistWithAdapters, name: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {k: rng.normal(scale=0.3, size=v.shape).astype(np.float32) for k, v in sw.get_adapter(name).items()}
    sw.set_adapter_weights(name, arrays)
    return arrays


def test_apply_adapters_merges_exactly_what_the_two_adapters_compute(tiny_chat_model: Path, tmp_path: Path) -> None:
    sw = _specialist(tiny_chat_model)
    g, p = _random_adapter(sw, GLOBAL, 1), _random_adapter(sw, PERSONAL, 2)
    gdir = write_adapter(tmp_path / "v5", g, sw.lora_config_dict(), kind="global", base=sw.fingerprint, version=5)
    pdir = write_adapter(tmp_path / "personal", p, sw.lora_config_dict(), kind="personal", base=sw.fingerprint)
    ids = torch.tensor([[5, 17, 300, 42, 1000, 7]])
    with torch.no_grad():
        sw.activate([GLOBAL, PERSONAL])
        both = sw.peft(input_ids=ids).logits
        sw.activate([GLOBAL])
        global_only = sw.peft(input_ids=ids).logits

    base = load_causal_lm(str(tiny_chat_model), progress=False)
    before = {k: v.clone() for k, v in base.model.state_dict().items()}
    device = apply_adapters(base, gdir.path, pdir.path, expect_version=5)
    verifier = apply_adapters(base, gdir.path, None, expect_version=5)
    with torch.no_grad():
        torch.testing.assert_close(device.model(input_ids=ids).logits, both, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(verifier.model(input_ids=ids).logits, global_only, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(both, global_only)
    assert type(device.model).__name__ == "LlamaForCausalLM"  # plain transformers, no peft wrappers
    assert device.name.endswith("+global-v5+personal")
    assert all(torch.equal(before[k], v) for k, v in base.model.state_dict().items())  # base untouched

    # The declared version must be the one loaded.
    with pytest.raises(AdapterError, match=r"mismatch: .* v5, but v6 was declared"):
        apply_adapters(base, gdir.path, None, expect_version=6)
    # An adapter trained for other base weights is refused, not silently applied.
    other = load_causal_lm(
        str(save_tiny(tmp_path, sw.lm.tokenizer, seed=99, name="other", hidden=32, heads=2)), progress=False
    )
    with pytest.raises(AdapterError, match="another base model"):
        apply_adapters(other, gdir.path, None)


def test_version_zero_is_the_base_model(tiny_chat_model: Path, tmp_path: Path) -> None:
    sw = _specialist(tiny_chat_model)
    v0 = write_adapter(
        tmp_path / "v0", sw.get_adapter(GLOBAL), sw.lora_config_dict(), kind="global", base=sw.fingerprint, version=0
    )
    base = load_causal_lm(str(tiny_chat_model), progress=False)
    merged = apply_adapters(base, v0.path, None, expect_version=0)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(merged.model(input_ids=ids).logits, base.model(input_ids=ids).logits)


@pytest.mark.parametrize("version", [-1, 2**31, "7", True])
def test_a_message_whose_adapter_version_no_session_can_declare_is_refused(version: object) -> None:
    """A version past the protocol's stayed the device's newest for good, and no session could then
    declare the adapter it serves with: one message broke the device's inference."""
    arrays = ArrayRecord({"a": Array(np.zeros(2, dtype=np.float32))})
    with _server_identity(run_id=1):
        for v, ok in ((3, True), (version, False)):
            config = ConfigRecord({"adapter-version": v, "server-round": 1})
            msg = Message(RecordDict({"arrays": arrays, "config": config}), dst_node_id=1, message_type="train")
            if ok:
                assert _unpack(msg, None, "fitins").version == 3  # type: ignore[arg-type]
            else:
                with pytest.raises(MessageRefusal, match=r"adapter version .* is outside"):
                    _unpack(msg, None, "fitins")  # type: ignore[arg-type]


# The cover-step tests' rounds: 4 DP steps of step_rows(4) rows each, on sequences short enough
# for the fast tier (the noise's scale does not depend on their length).
COVER_CFG = replace(CFG, dp_steps=4, max_len=160, context_chars=0)


def test_the_update_scale_says_nothing_of_the_historys_size(tiny_chat_model: Path, tmp_path: Path) -> None:
    """Opacus divided the noisy sum by n x q, a number of the history's size: rounds of noise alone
    (cover steps, no data read) on 5 and 9 examples had update norms 1.5x apart."""
    cfg = COVER_CFG
    sw = _specialist(tiny_chat_model, cfg)
    data = load_user(FIXTURE_USERS, index=1)
    train, _ = split_profile(data.profile, cfg.holdout)
    full = to_dataset(build_examples(sw.lm, train, train, cfg), pad_id=0, max_len=cfg.max_len)
    assert len(full) >= 9
    start = sw.get_adapter(GLOBAL)
    norms = []
    for n in (5, 9):  # expected batch sizes 2 and 3 under batches of 4
        sw.set_adapter_weights(GLOBAL, start)
        ledger = Ledger.load(tmp_path / f"ledger-{n}.json", epsilon_budget=50.0, delta=1e-5)
        subset = torch.utils.data.TensorDataset(*(t[:n] for t in full.tensors))
        norms.append(train_global_dp(sw, subset, cfg, ledger, private_steps=0).update_norm)
    assert norms[0] / norms[1] == pytest.approx(1.0, abs=0.2), norms  # 1.44 before; noise alone spreads it ~5 %


def test_a_device_with_no_usable_sequence_sends_noise_of_a_rounds_scale(tiny_chat_model: Path, tmp_path: Path) -> None:
    """It echoed the arrays it received, which told a server stepping `max-len` that none of the
    device's entries fit (and so the length of its shortest)."""
    cfg = COVER_CFG
    sw = _specialist(tiny_chat_model, cfg)
    data = load_user(FIXTURE_USERS, index=1)
    train, _ = split_profile(data.profile, cfg.holdout)
    dataset = to_dataset(build_examples(sw.lm, train, train, cfg), pad_id=0, max_len=cfg.max_len)
    start = sw.get_adapter(GLOBAL)
    ledger = Ledger.load(tmp_path / "ledger.json", epsilon_budget=50.0, delta=1e-5)
    cover = train_global_dp(sw, dataset, cfg, ledger, private_steps=0).update_norm
    noise = noise_only_update(start, cfg, cfg.dp_steps)
    norm = float(np.sqrt(sum(np.sum((noise[k] - start[k]) ** 2) for k in start)))
    assert norm == pytest.approx(cover, rel=0.2), (norm, cover)
