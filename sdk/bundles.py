"""Model bundles for the device: built once where torch is (`sdk models build`), loaded without it.

`build_bundle` converts a Specialist (an embedded name, a Hugging Face folder or a .gguf file;
optionally with a federation's global adapter merged in) for onnxruntime-genai and writes the
bundle folder of `core.bundle`. It needs the `[convert]` extra (torch, transformers, the ONNX
model builder). `load_bundle` checks every file against the manifest and returns the Specialist's
tokenizer facts and its ONNX drafter: a device with only the base install runs it.

`make install` builds the default Specialist's bundle into the cache (`default_bundle_path`), so
the device's first generation converts nothing.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace
from pathlib import Path
from typing import Any

from specsteer.core.adapter_files import adapter_label, state_fingerprint, state_folders
from specsteer.core.bundle import Bundle, open_bundle, write_bundle
from specsteer.core.device_lm import DeviceLM, load_device_lm
from specsteer.core.errors import ConfigError
from specsteer.core.gguf_cache import cache_root
from specsteer.core.model_registry import EMBEDDED_MODELS
from specsteer.core.onnx_cache import (
    DEFAULT_ONNX_PRECISION,
    ONNX_MARKER,
    ONNX_PRECISIONS,
    check_onnx_builder,
    converted_onnx,
    folder_fingerprint,
)
from specsteer.core.version import __version__
from specsteer.sdk.onnx_drafter import OnnxDrafter, onnx_source, safe_stem

__all__ = ["build_bundle", "default_bundle_path", "load_bundle"]


def default_bundle_path(name: str, precision: str = DEFAULT_ONNX_PRECISION, cache_dir: Path | None = None) -> Path:
    """Where `sdk models build` puts an embedded model's bundle unless told (`make install` builds
    the default Specialist's there), and where the device looks for one by name."""
    return cache_root(cache_dir) / "bundles" / f"{safe_stem(name)}-{precision}"


def load_bundle(bundle: Bundle | str | Path, **drafter_options: Any) -> tuple[DeviceLM, OnnxDrafter]:
    """The Specialist's tokenizer facts and its ONNX drafter from a bundle whose every file matches
    its manifest (checked now unless `bundle` was just opened); `drafter_options` go to
    `OnnxDrafter` (threads, context_tokens)."""
    if not isinstance(bundle, Bundle):
        bundle = open_bundle(bundle)
    lm = replace(load_device_lm(bundle.folder, progress=False), name=bundle.name)
    return lm, OnnxDrafter(bundle.onnx_folder, lm, **drafter_options)


def build_bundle(
    spec: str,
    out: Path | None = None,
    *,
    precision: str = DEFAULT_ONNX_PRECISION,
    federation_state: Path | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> Bundle:
    """Convert the Specialist `spec` (with `federation_state`'s global adapter merged in, if given)
    into a new bundle at `out` (by default `default_bundle_path`, for an embedded name)."""
    if precision not in ONNX_PRECISIONS:
        raise ConfigError(f"unknown ONNX precision {precision!r}; choose one of: {', '.join(ONNX_PRECISIONS)}")
    check_onnx_builder()
    if out is None:
        if spec not in EMBEDDED_MODELS:
            raise ConfigError("say where the bundle goes (--out DIR): only an embedded model has a default place")
        out = default_bundle_path(spec, precision, cache_dir)
    out = Path(out).expanduser()
    if out.exists():
        raise ConfigError(f"{out} already exists: a bundle is written into a new folder")
    source, stem = onnx_source(spec, cache_dir, progress)
    weights_sha256 = folder_fingerprint(source)  # hashes every weight file of a plain folder: once
    base_name = EMBEDDED_MODELS[spec].name if spec in EMBEDDED_MODELS else stem
    base: dict[str, Any] = {"name": base_name, "weights_sha256": weights_sha256}
    if spec in EMBEDDED_MODELS and (split := EMBEDDED_MODELS[spec].split) is not None:
        base["gguf_sha256"] = split.sha256
    adapter: dict[str, Any] | None = None
    name = base_name
    if federation_state is None:
        onnx_folder = converted_onnx(
            lambda: source,
            weights_sha256,
            precision,
            cache_root(cache_dir),
            stem=safe_stem(stem),
            progress=progress,
        )
    else:
        state = Path(federation_state).expanduser()
        if not state.is_dir():
            raise ConfigError(f"the federation state folder {state} does not exist")
        version, _, personal = state_folders(state)
        if personal is not None:
            # A bundle ships to every device; a personal adapter belongs to one and never leaves it.
            raise ConfigError(f"{state} holds a personal adapter: a bundle carries the base model or a global adapter")
        if version is None:
            raise ConfigError(f"{state} holds no global adapter to merge")
        name = adapter_label(base_name, version, False)
        merged_lm = replace(load_device_lm(source, progress=False), name=name)
        drafter = OnnxDrafter.for_federated(
            spec, merged_lm, state, precision=precision, cache_dir=cache_dir, progress=progress
        )
        onnx_folder = drafter.folder
        adapter = {"global_version": version, "sha256": state_fingerprint(state)}
    builder = {"onnxruntime_genai": importlib.metadata.version("onnxruntime-genai"), "specsteer_sdk": __version__}
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_bundle(
        out,
        model_folder=source,
        onnx_folder=onnx_folder,
        name=name,
        precision=precision,
        base=base,
        adapter=adapter,
        builder=builder,
        skip=(ONNX_MARKER,),
    )
