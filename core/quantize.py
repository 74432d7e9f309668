"""int8 dynamic quantization of a loaded model's Linear layers (`load_causal_lm(quantize="int8")`)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

import torch

from specsteer.core.linear import use_linear_kernel

if TYPE_CHECKING:  # core.models imports this module to apply the option
    from specsteer.core.models import CausalLM

__all__ = ["QUANTIZE_CHOICES", "quantize_linear"]

QUANTIZE_CHOICES: tuple[str | None, ...] = (None, "fp32", "int8")


def quantize_linear(lm: CausalLM) -> CausalLM:
    """int8 dynamic quantization of every `nn.Linear` (weights int8 per tensor, activations
    quantized on the fly; fbgemm/x86 kernels, which need only AVX2). On CPUs where a K+1-token
    block is compute-bound this is the cheap way to cut both step and block cost; the embedding
    (and so a tied output head's input side) stays fp32, and log-probabilities stay fp32.
    The model is converted in place (no second fp32 copy at peak): `lm` must not be used after."""
    from torch.ao.quantization import quantize_dynamic

    use_linear_kernel(lm.model, "torch")  # quantize_dynamic converts exact nn.Linear layers only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices, once per layer
        model = quantize_dynamic(lm.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    model.eval()
    return dataclasses.replace(lm, name=f"{lm.name} (int8)", model=model)
