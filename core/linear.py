"""Which CPU kernel runs the models' fp32 Linear layers at inference.

torch hands an fp32 `nn.Linear` to MKL's sgemm. On the project's AMD EPYC (AVX2) that path is
slow for the short inputs decoding feeds: a 5-token block of Qwen2.5-Coder-1.5B costs 2.8x a
1-token step, so the blocks a verify round feeds are compute-bound. oneDNN's inner product, which
ships in the same torch wheel, runs the same block 2.1x faster (1.95x its own step) and the step
1.46x faster (`python -m bench.speed --compare-kernels`, docs/results/speed_kernels.md). Same fp32
weights, read in place: no packed copy (oneDNN's prepacked weights make blocks cheaper still but
double the memory, and would go stale when an adapter is merged into a deep copy). Results differ
from MKL's by summation order only (about 2e-5 on the 1.5B's logits).

Training is untouched: with autograd on, `OneDNNLinear` is an ordinary `nn.Linear`.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import nn

from specsteer.core.errors import ModelLoadError

__all__ = [
    "LINEAR_KERNELS",
    "OneDNNLinear",
    "onednn_available",
    "onednn_linear",
    "resolve_linear_kernel",
    "use_linear_kernel",
]

# "auto": oneDNN where this torch build has it (x86 wheels do), else torch's default.
LINEAR_KERNELS = ("auto", "onednn", "torch")
KERNEL_ENV = "SPECSTEER_LINEAR_KERNEL"


class OneDNNLinear(nn.Linear):
    """An `nn.Linear` whose inference forward is oneDNN's fp32 inner product.

    Still an `nn.Linear` (peft wraps it, `quantize_dynamic` is given plain ones back, state dicts
    are unchanged); any case oneDNN is not used for falls through to `nn.Linear.forward`.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return onednn_linear(x, self.weight, self.bias)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`OneDNNLinear`'s forward as a function of its tensors (for forwards that hold fused weights
    rather than the layers, server.fused_decoder): oneDNN's inner product at fp32 inference on the
    CPU, torch's `linear` in every other case."""
    if torch.is_grad_enabled() or not _onednn_fits(x, weight):
        return nn.functional.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _onednn_fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32


@functools.cache
def onednn_available() -> bool:
    """Whether this torch build runs oneDNN's inner product and it agrees with `nn.Linear` (probed once)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(*shape, generator=gen) for shape in ((2, 3, 64), (48, 64), (48,)))
        with torch.inference_mode():
            got = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
            want = torch.nn.functional.linear(x, w, b)
        return bool(got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-4))
    except (RuntimeError, AttributeError):  # an op missing from this build, or one that fails on this CPU
        return False


def resolve_linear_kernel(kernel: str | None) -> str:
    """The kernel to use: `kernel`, else `$SPECSTEER_LINEAR_KERNEL`, else "auto", resolved to a concrete one."""
    chosen = kernel or os.environ.get(KERNEL_ENV) or "auto"
    if chosen not in LINEAR_KERNELS:
        where = f"{KERNEL_ENV}={chosen!r}" if kernel is None else repr(chosen)
        raise ModelLoadError(f"Unknown Linear kernel {where}: use one of {', '.join(LINEAR_KERNELS)}.")
    if chosen == "auto":
        return "onednn" if onednn_available() else "torch"
    if chosen == "onednn" and not onednn_available():
        raise ModelLoadError("The oneDNN Linear kernel is not available in this torch build: use 'torch' or 'auto'.")
    return chosen


def use_linear_kernel(model: nn.Module, kernel: str) -> int:
    """Run every plain `nn.Linear` of `model` on `kernel` ("onednn" or "torch"), in place.

    Returns how many layers were switched. Other Linear types (int8, peft's LoRA wrappers) are left
    as they are; a LoRA wrapper's base layer is itself a plain Linear and is switched.
    """
    target = {"onednn": OneDNNLinear, "torch": nn.Linear}[kernel]
    switched = 0
    for module in model.modules():
        if type(module) in (nn.Linear, OneDNNLinear) and type(module) is not target:
            module.__class__ = target
            switched += 1
    return switched
