"""Where a model runs and in which float type: the checks behind `load_causal_lm(device=, dtype=)`.

The CPU in fp32 is the default and the reference path (the oracle tests hold it exactly). A GPU
runs the cloud's models in bf16 or fp16 at its memory-bandwidth floor; log-probabilities are
computed in fp32 whatever the model's dtype (`core.steering.log_softmax`).

Cheap to import (torch is imported inside the functions), so a config can be checked before
anything heavy loads.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from specsteer.core.errors import ModelLoadError

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_DEVICE",
    "DEFAULT_DTYPE",
    "DTYPE_CHOICES",
    "check_placement",
    "check_placement_names",
    "resolve_device",
    "resolve_dtype",
]

DEFAULT_DEVICE = "cpu"
DEFAULT_DTYPE = "float32"
DTYPE_CHOICES = ("float32", "bfloat16", "float16")
DEVICE_TYPES = ("cpu", "cuda")
_DEVICE_NAME = re.compile(r"(cpu|cuda)(?::[0-9]+)?")  # what torch.device takes, of DEVICE_TYPES


def resolve_dtype(dtype: str) -> torch.dtype:
    """The torch dtype named `dtype` (one of `DTYPE_CHOICES`)."""
    import torch

    if dtype not in DTYPE_CHOICES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}: use one of {', '.join(DTYPE_CHOICES)}.")
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def resolve_device(device: str) -> torch.device:
    """The torch device named `device` ("cpu", "cuda" or "cuda:N"), refused where this machine has none."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        parsed = None
    if parsed is None or parsed.type not in DEVICE_TYPES:
        raise ModelLoadError(f"Unknown device {device!r}: use cpu, cuda or cuda:N.")
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(f"Device {device!r} asked for, but this machine's torch sees no CUDA GPU.")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ModelLoadError(f"Device {device!r} asked for, but this machine has {count} CUDA GPU(s).")
    return parsed


def check_placement_names(device: str, dtype: str, quantize: str | None = None) -> None:
    """What `check_placement` refuses that needs no torch: an unknown dtype or device name, int8
    anywhere but the CPU in float32 (`ModelLoadError`). Imports nothing, so a config is checked
    before torch loads; whether a named CUDA device exists is `check_placement`'s to say."""
    if dtype not in DTYPE_CHOICES:
        raise ModelLoadError(f"Unknown dtype {dtype!r}: use one of {', '.join(DTYPE_CHOICES)}.")
    if not isinstance(device, str) or not _DEVICE_NAME.fullmatch(device):
        raise ModelLoadError(f"Unknown device {device!r}: use cpu, cuda or cuda:N.")
    if quantize == "int8" and (not device.startswith("cpu") or dtype != "float32"):
        raise ModelLoadError(
            f"int8 quantization runs on the CPU in float32 only, not on {device} in {dtype}: "
            "drop the quantization or use the CPU in float32."
        )


def check_placement(device: str, dtype: str, quantize: str | None = None) -> tuple[torch.device, torch.dtype]:
    """`device` and `dtype` resolved, and refused in combinations no kernel here serves.

    int8 quantization is torch's dynamic quantization: fbgemm kernels over fp32 activations, CPU only.
    """
    check_placement_names(device, dtype, quantize)
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    if quantize == "int8" and (torch_device.type != "cpu" or dtype != "float32"):
        raise ModelLoadError(
            f"int8 quantization runs on the CPU in float32 only, not on {device} in {dtype}: "
            "drop the quantization or use the CPU in float32."
        )
    return torch_device, torch_dtype
