"""specsteer.core.linear: loaded fp32 models run their Linear layers on oneDNN at inference, and only there."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

import specsteer.core.linear
from specsteer.core.errors import ModelLoadError
from specsteer.core.linear import KERNEL_ENV, OneDNNLinear, resolve_linear_kernel
from specsteer.core.models import load_causal_lm
from specsteer.core.quantize import quantize_linear
from tests.tinymodels import save_tiny

IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
ONEDNN_OP = "mkldnn::_linear_pointwise"

needs_onednn = pytest.mark.skipif(not specsteer.core.linear.onednn_available(), reason="this torch build has no oneDNN")


def _ops_run(model: torch.nn.Module, *, grad: bool = False) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        if grad:
            model(IDS).logits.sum().backward()
        else:
            with torch.inference_mode():
                model(IDS)
    return {event.name for event in prof.events()}


@needs_onednn
def test_a_loaded_fp32_model_runs_every_linear_on_onednn_with_the_same_logits(tmp_path, char_tok) -> None:
    # MKL's sgemm makes a 5-token block of the 1.5B cost 2.8x a step on this CPU; oneDNN 1.95x.
    folder = save_tiny(tmp_path, char_tok, seed=4)
    default = load_causal_lm(folder)
    plain = load_causal_lm(folder, linear_kernel="torch")
    linears = [m for m in default.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is OneDNNLinear for m in linears)
    assert all(type(m) is torch.nn.Linear for m in plain.model.modules() if isinstance(m, torch.nn.Linear))
    assert ONEDNN_OP in _ops_run(default.model)
    assert ONEDNN_OP not in _ops_run(plain.model)
    with torch.inference_mode():
        got, want = default.model(IDS).logits, plain.model(IDS).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@needs_onednn
def test_training_a_onednn_model_takes_torchs_path_and_gets_the_same_gradients(tmp_path, char_tok) -> None:
    # The federation LoRA-tunes models it loads with load_causal_lm; oneDNN's op has no backward.
    folder = save_tiny(tmp_path, char_tok, seed=4)
    default, plain = load_causal_lm(folder), load_causal_lm(folder, linear_kernel="torch")
    assert ONEDNN_OP not in _ops_run(default.model, grad=True)
    plain.model(IDS).logits.sum().backward()
    for (name, a), (_, b) in zip(default.model.named_parameters(), plain.model.named_parameters(), strict=True):
        assert a.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


@needs_onednn
def test_a_lora_adapter_merges_into_a_onednn_model_as_into_a_plain_one(tmp_path, char_tok) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=4)
    merged = []
    for kernel in ("onednn", "torch"):
        lm = load_causal_lm(folder, linear_kernel=kernel)
        torch.manual_seed(0)
        lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        peft_model = get_peft_model(lm.model, lora)
        merged.append(peft_model.merge_and_unload())
    assert type(merged[0].model.layers[0].self_attn.q_proj) is OneDNNLinear
    with torch.inference_mode():
        torch.testing.assert_close(merged[0](IDS).logits, merged[1](IDS).logits, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_int8_quantizes_a_onednn_model_completely(tmp_path, char_tok) -> None:
    # quantize_dynamic converts exact nn.Linear layers only: a oneDNN layer left fp32 would be silent.
    lm = quantize_linear(load_causal_lm(save_tiny(tmp_path, char_tok, seed=4)))
    assert not any(isinstance(m, torch.nn.Linear) for m in lm.model.modules())


def test_unknown_kernels_are_one_sentence(tmp_path, char_tok, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=4)
    with pytest.raises(ModelLoadError, match="Unknown Linear kernel 'mkl': use one of auto, onednn, torch"):
        load_causal_lm(folder, linear_kernel="mkl")
    monkeypatch.setenv(KERNEL_ENV, "fast")
    with pytest.raises(ModelLoadError, match=f"Unknown Linear kernel {KERNEL_ENV}='fast'"):
        load_causal_lm(folder)
    monkeypatch.setenv(KERNEL_ENV, "torch")
    assert resolve_linear_kernel(None) == "torch"
    assert resolve_linear_kernel("auto") in ("onednn", "torch")


def test_without_onednn_auto_falls_back_and_an_explicit_request_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    monkeypatch.setattr(specsteer.core.linear, "onednn_available", lambda: False)
    assert resolve_linear_kernel(None) == "torch"
    with pytest.raises(ModelLoadError, match="oneDNN Linear kernel is not available"):
        resolve_linear_kernel("onednn")
