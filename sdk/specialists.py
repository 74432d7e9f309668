"""The device's Specialist from its settings: which model, on which drafter, with which adapters.

One set of rules for every way a device is built (`SpecSteerClient.from_config`, `sdk generate
--server`, the benchmarks):

- a model bundle (a folder `sdk models build` wrote) drafts on onnxruntime-genai, as built, with
  every file checked against its manifest; no torch is imported;
- an embedded model name with the ONNX drafter uses its bundle in the cache when there is one
  (`make install` builds the default Specialist's), so the first generation converts nothing;
- otherwise the model is converted once into the cache (the `[convert]` extra), and the drafter
  runs the converted weights; with a federation state the device's global and personal adapters
  are merged in first (the personal adapter never leaves the device, so it is never in a bundle).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from specsteer.core.bundle import is_bundle, open_bundle
from specsteer.core.errors import ConfigError
from specsteer.core.model_registry import DEFAULT_SPECIALIST, EMBEDDED_MODELS
from specsteer.core.onnx_cache import DEFAULT_ONNX_PRECISION
from specsteer.sdk.context import Profile
from specsteer.sdk.drafters import DEFAULT_DRAFTER, drafter_for

if TYPE_CHECKING:
    from specsteer.core.device_lm import DeviceLM
    from specsteer.sdk.decoding import Drafter, Specialist

__all__ = ["DEFAULT_CONTEXT_ENTRIES", "load_specialist"]

DEFAULT_CONTEXT_ENTRIES = 3  # history entries retrieval puts in the Specialist's private prompt


def load_specialist(
    model: str | Path = DEFAULT_SPECIALIST,
    profile: Profile | None = None,
    *,
    drafter: str = DEFAULT_DRAFTER,
    precision: str | None = None,
    federation_state: Path | None = None,
    quantize: str = "fp32",
    context_entries: int = DEFAULT_CONTEXT_ENTRIES,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> Specialist:
    """The device's Specialist (with the user's `profile`) on the drafter these settings name."""
    from specsteer.sdk.bundles import default_bundle_path, load_bundle
    from specsteer.sdk.decoding import Specialist

    spec = str(model)
    if is_bundle(spec):
        if drafter != "onnx" or federation_state is not None:
            raise ConfigError(
                f"{spec} is a model bundle, which drafts on onnx as it was built: "
                "drop the drafter and federation settings, or give the model itself"
            )
        bundle = open_bundle(spec)
        if precision is not None and precision != bundle.precision:
            raise ConfigError(f"the bundle {spec} is {bundle.precision}, not {precision}")
        lm, onnx = load_bundle(bundle)
        return Specialist(lm, profile, context_entries=context_entries, drafter=onnx)
    chosen = precision or DEFAULT_ONNX_PRECISION
    cached = default_bundle_path(spec, chosen, cache_dir) if spec in EMBEDDED_MODELS else None
    if drafter == "onnx" and federation_state is None and cached is not None and is_bundle(cached):
        lm, onnx = load_bundle(cached)
        return Specialist(lm, profile, context_entries=context_entries, drafter=onnx)
    if drafter == "onnx" or (drafter != "torch" and federation_state is None):
        # Another backend runs the forwards: nothing here needs torch (about 380 MB resident with
        # transformers), only the tokenizer and the model's facts.
        from specsteer.core.device_lm import load_device_lm

        device_lm = load_device_lm(spec, cache_dir=cache_dir, progress=progress)
        if federation_state is None:
            backend = drafter_for(drafter, spec, device_lm, precision=precision, cache_dir=cache_dir)
        else:
            backend, device_lm = _federated_onnx(spec, device_lm, Path(federation_state), chosen, cache_dir)
        return Specialist(device_lm, profile, context_entries=context_entries, drafter=backend)
    from specsteer.core.models import load_causal_lm

    torch_lm = load_causal_lm(spec, cache_dir=cache_dir, quantize=quantize, progress=progress)
    if federation_state is not None:
        from specsteer.core.adapters import load_device_specialist

        torch_lm = load_device_specialist(torch_lm, federation_state)[0]
    backend = drafter_for(
        drafter, spec, torch_lm, precision=precision, cache_dir=cache_dir, from_weights=federation_state is not None
    )
    return Specialist(torch_lm, profile, context_entries=context_entries, drafter=backend)


def _federated_onnx(
    spec: str, lm: DeviceLM, state: Path, precision: str, cache_dir: Path | None
) -> tuple[Drafter, DeviceLM]:
    """The ONNX drafter on the Specialist with the device's adapters merged in, and the Specialist
    under the merged model's name; torch loads only when this adapter version is not converted yet."""
    from specsteer.core.adapter_files import adapter_label, state_folders
    from specsteer.sdk.onnx_drafter import OnnxDrafter

    if not state.is_dir():
        raise ConfigError(f"the federation state folder {state} does not exist")
    version, _, personal_dir = state_folders(state)
    merged = replace(lm, name=adapter_label(lm.name, version, personal_dir is not None))
    return OnnxDrafter.for_federated(spec, merged, state, precision=precision, cache_dir=cache_dir), merged
