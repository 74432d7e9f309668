"""Reading federated LoRA adapters and putting them onto a Specialist: what device and cloud share.

Every adapter — each version of the federated *global* adapter and a device's *personal* one — is
a folder that peft itself can load::

    adapter_config.json          peft's LoraConfig
    adapter_model.safetensors    the LoRA A/B matrices, peft's key names (no adapter name inside)
    manifest.json                kind, version, sha256 of the weights file, base-model fingerprint

The manifest is written last (by `federation.adapters.write_adapter`), so a folder without one is
an interrupted write and is never used. A manifest with ``"sealed": true`` means the weights file
is encrypted at rest; reading it needs an `Unseal` function from whoever holds the key (core
imports nothing of ours, so it cannot open a vault itself).

Global versions live side by side as ``<adapters>/v<N>/``. `apply_adapters` is the one entry point
inference needs:

* the cloud verifier's generic Specialist copy (P_S^0) = base + global v<N>
  (`load_global_adapter(N, adapters_dir)` then `apply_adapters`);
* the device's Specialist = base + global v<N> + personal (`load_device_specialist`).

Both sides must use the same N: the device declares it as the session parameter
``adapter_version`` (0 = the untrained initial adapter, which equals the base model because LoRA's
B matrices start at zero). A version the verifier does not have, or an adapter built for another
base model, is an `AdapterError`, never silently different logits.

This module is the reading side only; writing versions and training them is `federation`'s.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specsteer.core.adapter_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    GLOBAL,
    MANIFEST,
    MAX_VERSION,
    PERSONAL,
    adapter_label,
    adapter_versions,
    latest_version,
    state_folders,
    version_dir,
)
from specsteer.core.errors import AdapterError
from specsteer.core.models import CausalLM

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "GLOBAL",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "MAX_VERSION",
    "PERSONAL",
    "AdapterError",
    "AdapterFolder",
    "Unseal",
    "adapter_versions",
    "apply_adapters",
    "base_fingerprint",
    "latest_version",
    "load_device_specialist",
    "load_global_adapter",
    "load_tensors",
    "read_adapter",
    "version_dir",
]

MANIFEST_FORMAT = 1

Unseal = Callable[[Path], bytes]
"""Reads and decrypts a sealed weights file (the device's key provider, e.g. `privacy.vault`)."""


@dataclass(frozen=True)
class AdapterFolder:
    """A validated adapter folder and what its manifest says."""

    path: Path
    kind: str  # "global" or "personal"
    version: int | None  # global adapters only
    manifest: dict[str, Any]

    @property
    def base(self) -> str:
        return str(self.manifest.get("base_fingerprint", ""))

    @property
    def sealed(self) -> bool:
        return bool(self.manifest.get("sealed", False))


def base_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of the base model's architecture and a slice of its weights.

    An adapter only means something on the weights it was trained against; two models with the
    same architecture but different weights (e.g. two checkpoints) must not share adapters.
    """
    base = _unwrap(model)
    config = getattr(base, "config", None)
    keys = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
    arch = {k: getattr(config, k, None) for k in keys}
    digest = hashlib.sha256(json.dumps(arch, sort_keys=True).encode())
    embeddings = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    weight = getattr(embeddings, "weight", None)
    if isinstance(weight, torch.Tensor):
        # The first rows are enough to tell checkpoints apart and cost nothing to hash.
        digest.update(weight[:8].detach().to(torch.float32).cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def read_adapter(folder: str | Path, *, kind: str | None = None, version: int | None = None) -> AdapterFolder:
    """Validate an adapter folder: manifest present, weights intact, kind and version as expected."""
    path = Path(folder)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{path} is not a complete adapter folder (no {MANIFEST}).") from None
    except (OSError, ValueError) as exc:
        raise AdapterError(f"Cannot read the adapter manifest in {path}: {exc}.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise AdapterError(f"{path / MANIFEST} is not an adapter manifest this version understands.")
    if kind is not None and manifest.get("kind") != kind:
        raise AdapterError(f"{path} holds a {manifest.get('kind')} adapter, not a {kind} one.")
    if version is not None and manifest.get("version") != version:
        raise AdapterError(
            f"Adapter version mismatch: {path} holds global adapter v{manifest.get('version')}, "
            f"but v{version} was declared."
        )
    weights = path / ADAPTER_WEIGHTS
    if not weights.is_file() or sha256_file(weights) != manifest.get("sha256"):
        raise AdapterError(f"The adapter weights in {path} are missing or do not match their manifest.")
    return AdapterFolder(path, str(manifest.get("kind")), manifest.get("version"), manifest)


def load_tensors(adapter: AdapterFolder, unseal: Unseal | None = None) -> dict[str, np.ndarray]:
    """The adapter's arrays, decrypted in memory with `unseal` when the folder is sealed."""
    from safetensors.numpy import load as load_numpy

    weights = adapter.path / ADAPTER_WEIGHTS
    if adapter.sealed:
        if unseal is None:
            raise AdapterError(f"The {adapter.kind} adapter in {adapter.path} is sealed; its key is needed to read it.")
        raw = unseal(weights)
    else:
        raw = weights.read_bytes()
    try:
        return dict(load_numpy(raw))
    except Exception as exc:  # safetensors raises its own error type for a damaged buffer
        raise AdapterError(f"The adapter weights in {adapter.path} cannot be parsed: {_one_line(exc)}.") from None


def load_global_adapter(version: int, adapters_dir: str | Path) -> AdapterFolder:
    """The validated folder of global adapter `version`; an `AdapterError` if it is absent or damaged.

    Pass the result's ``.path`` to `apply_adapters` with ``expect_version=version``.
    """
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
        raise AdapterError(f"An adapter version is an integer in [0, {MAX_VERSION}], not {version!r}.")
    folder = version_dir(adapters_dir, version)
    if not folder.is_dir():
        have = adapter_versions(adapters_dir)
        known = f"available: v{have[0]}..v{have[-1]}" if have else "none available"
        raise AdapterError(f"Global adapter v{version} is not in {adapters_dir} ({known}).")
    return read_adapter(folder, kind=GLOBAL, version=version)


def apply_adapters(
    base_lm: CausalLM,
    global_dir: str | Path | None,
    personal_dir: str | Path | None = None,
    *,
    expect_version: int | None = None,
    inplace: bool = False,
    unseal: Unseal | None = None,
) -> CausalLM:
    """`base_lm` with the global adapter (and the personal one, if given) merged into its weights.

    Returns a plain transformers model (no peft wrappers), so the engine's KV-cache code runs on it
    unchanged and at base-model speed. LoRA deltas add up, so merging global then personal equals
    running both adapters side by side. `expect_version` is the session's declared
    ``adapter_version``: a global folder of another version raises `AdapterError`. With
    ``inplace=False`` (the default) `base_lm` is left untouched. A sealed folder is decrypted in
    memory with `unseal`; its plaintext weights never touch the disk.
    """
    from peft import PeftConfig, PeftModel, set_peft_model_state_dict

    if global_dir is None and personal_dir is None:
        return base_lm
    fingerprint = base_fingerprint(base_lm.model)
    folders: list[tuple[str, AdapterFolder]] = []
    if global_dir is not None:
        folders.append((GLOBAL, read_adapter(global_dir, kind=GLOBAL, version=expect_version)))
    elif expect_version is not None:
        raise AdapterError(f"Adapter version v{expect_version} was declared but no global adapter was given.")
    if personal_dir is not None:
        folders.append((PERSONAL, read_adapter(personal_dir, kind=PERSONAL)))
    for _, folder in folders:
        if folder.base != fingerprint:
            raise AdapterError(
                f"The adapter in {folder.path} was trained for another base model "
                f"(fingerprint {folder.base}, this model {fingerprint})."
            )

    model: Any = base_lm.model if inplace else copy.deepcopy(base_lm.model)
    # Adapters are created on the model's device before loading, as peft expects (CPU here).
    model.to("cpu")
    for name, folder in folders:
        try:
            if folder.sealed:
                tensors = load_tensors(folder, unseal)
                config = PeftConfig.from_pretrained(str(folder.path))
                wrapped = PeftModel(model, config, adapter_name=name)
                state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in tensors.items()}
                set_peft_model_state_dict(wrapped, state, adapter_name=name)
            else:
                wrapped = PeftModel.from_pretrained(model, str(folder.path), adapter_name=name, is_trainable=False)
        except AdapterError:
            raise
        except Exception as exc:  # peft raises many types for a config that does not fit the model
            raise AdapterError(f"Cannot load the {name} adapter in {folder.path}: {_one_line(exc)}.") from exc
        model = wrapped.merge_and_unload()
    versions = [folder.version for name, folder in folders if name == GLOBAL]
    label = adapter_label(base_lm.name, versions[0] if versions else None, any(n == PERSONAL for n, _ in folders))
    return CausalLM.from_parts(label, model, base_lm.tokenizer)


def load_device_specialist(
    base: CausalLM, state_dir: str | Path, *, unseal: Unseal | None = None
) -> tuple[CausalLM, int]:
    """A device's Specialist for inference: `base` + its newest global adapter + its personal one.

    Returns the merged model and the global version to declare as the session's ``adapter_version``
    (0, the base weights, when the device holds no global adapter yet). The verifier merges the
    same global version into its generic copy, so both sides score with the same P_S^0 weights.
    """
    state = Path(state_dir)
    if not state.is_dir():
        raise AdapterError(f"The federation state folder {state} does not exist.")
    version, global_dir, personal_dir = state_folders(state)
    lm = apply_adapters(base, global_dir, personal_dir, expect_version=version, unseal=unseal)
    return lm, version or 0


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _unwrap(model: torch.nn.Module) -> Any:
    # A PeftModel (or Opacus wrapper) keeps the transformers model under .base_model.model / ._module.
    inner: Any = model
    for _ in range(4):
        kind = type(inner).__name__
        if kind == "GradSampleModule":
            inner = inner._module
        elif kind.startswith("PeftModel"):
            inner = inner.base_model
        elif kind == "LoraModel":
            inner = inner.model
        else:
            break
    return inner


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.rstrip(".")[:300]
