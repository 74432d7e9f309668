"""The backends a device's Specialist can run its forwards on, by name (`sdk generate --drafter`).

The backends themselves (`sdk.llamacpp`, `sdk.onnx_drafter`) import torch and their runtimes, so
they are imported only when one is chosen: the CLI builds its options from this module alone.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, cast

from specsteer.core.errors import ConfigError
from specsteer.core.onnx_cache import DEFAULT_ONNX_PRECISION, ONNX_PRECISIONS, check_onnx_runtime

if TYPE_CHECKING:
    from specsteer.core.device_lm import SpecialistLM
    from specsteer.core.models import CausalLM
    from specsteer.sdk.decoding import Drafter

__all__ = [
    "DEFAULT_DRAFTER",
    "DEFAULT_ONNX_PRECISION",
    "DRAFTERS",
    "LLAMACPP_INSTALL_HINT",
    "ONNX_PRECISIONS",
    "check_drafter_choice",
    "check_drafter_installed",
    "drafter_for",
]

DRAFTERS = ("torch", "llamacpp", "onnx")
"""Where the device's Specialist runs its forwards: torch (the loaded model, the reference the
exactness tests use), llama.cpp (its GGUF) or onnxruntime-genai (the model converted at int4, int8
or fp32; the default)."""

DEFAULT_DRAFTER = "onnx"
"""onnxruntime-genai at int4: prebuilt wheels, no compiler, a device process under 1 GB without
torch (docs/results/device_footprint.md), drafts of the same quality (docs/results/README.md)."""

LLAMACPP_INSTALL_HINT = "pip install 'specsteer-sdk[llamacpp]' (llama-cpp-python builds from source, about 15-45 min)"


# How a refusal names the choice: in the library's arguments, or in `sdk generate`'s flags.
_REFUSALS = {
    False: {
        "precision": "a drafter precision is for the onnx drafter, not {kind}",
        "adapters": "the llamacpp drafter runs the base GGUF, without the federation's adapters",
    },
    True: {
        "precision": "--drafter-precision is for --drafter onnx, not {kind}",
        "adapters": "--drafter llamacpp runs the base GGUF, without --federation-state's adapters: "
        "use --drafter onnx or torch",
    },
}


def check_drafter_choice(
    kind: str, *, precision: str | None = None, with_adapters: bool = False, flags: bool = False
) -> None:
    """The drafter rules, before any model loads: a known drafter, a precision for the onnx drafter
    only, and no federation adapters on llama.cpp (they are merged into the torch model only, and
    drafting on the base GGUF would drop them). `flags` words a refusal in `sdk generate`'s flags.
    """
    if kind not in DRAFTERS:
        raise ConfigError(f"unknown drafter {kind!r}; choose one of: {', '.join(DRAFTERS)}")
    refusal = _REFUSALS[flags]
    if precision is not None and kind != "onnx":
        raise ConfigError(refusal["precision"].format(kind=kind))
    if with_adapters and kind == "llamacpp":
        raise ConfigError(refusal["adapters"])


def drafter_for(
    kind: str,
    spec: str,
    lm: SpecialistLM,
    *,
    precision: str | None = None,
    cache_dir: Path | None = None,
    from_weights: bool = False,
) -> Drafter | None:
    """The drafter `kind` names for the Specialist `spec` loaded as `lm`; None for torch's own forwards.

    `precision` is the ONNX drafter's (int4 unless given; no other drafter takes one).
    `from_weights` converts the weights `lm` holds rather than `spec`'s files: a Specialist with
    the federation's adapters merged in (only the ONNX drafter can).
    """
    check_drafter_choice(kind, precision=precision, with_adapters=from_weights)
    if kind == "torch":
        return None
    if kind == "llamacpp":
        from specsteer.sdk.llamacpp import LlamaCppDrafter

        return LlamaCppDrafter.for_specialist(spec, lm)
    from specsteer.sdk.onnx_drafter import OnnxDrafter

    chosen = precision or DEFAULT_ONNX_PRECISION
    if from_weights:
        return OnnxDrafter.for_loaded(cast("CausalLM", lm), precision=chosen, cache_dir=cache_dir)
    return OnnxDrafter.for_specialist(spec, lm, precision=chosen, cache_dir=cache_dir)


def check_drafter_installed(kind: str) -> None:
    """Fail before any model loads if `kind`'s backend is not installed."""
    if kind == "llamacpp" and importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(f"the llama.cpp drafter needs llama-cpp-python: {LLAMACPP_INSTALL_HINT}")
    if kind == "onnx":
        check_onnx_runtime()
