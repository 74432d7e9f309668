"""Adapter folders on disk, and putting them onto a Specialist for inference.

Every adapter — each version of the federated *global* adapter and a device's *personal* one — is
a folder that peft itself can load::

    adapter_config.json          peft's LoraConfig
    adapter_model.safetensors    the LoRA A/B matrices, peft's key names (no adapter name inside)
    manifest.json                ours: kind, version, sha256 of the safetensors, base-model fingerprint

The manifest is written last, so a folder without one is an interrupted write and is never used.

`apply_adapters` is the one entry point inference needs:

* the cloud verifier's generic Specialist copy (P_S^0) = base + global v<N>;
* the device's Specialist = base + global v<N> + personal.

Both sides must use the same N: the device declares it as the session parameter
``adapter_version`` (uint32; 0 = version 0, the untrained initial adapter, which equals the base
model exactly because LoRA's B matrices start at zero) and the verifier loads that version with
`federation.store.load_global_adapter`. A version the verifier does not have, or an adapter built
for another base model, is an `AdapterError`, never silently different logits.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy_file
from safetensors.numpy import save_file as save_numpy_file

from core.errors import ConfigError
from core.models import CausalLM
from federation.ledger import atomic_write_json

__all__ = [
    "ADAPTER_WEIGHTS",
    "MANIFEST",
    "AdapterError",
    "AdapterFolder",
    "apply_adapters",
    "base_fingerprint",
    "read_adapter",
    "write_adapter",
]

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


class AdapterError(ConfigError):
    """An adapter folder is missing, damaged, of the wrong version, or built for another base model."""


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


def write_adapter(
    folder: Path,
    tensors: Mapping[str, np.ndarray],
    lora_config: dict[str, Any],
    *,
    kind: str,
    base: str,
    version: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> AdapterFolder:
    """Write an adapter folder atomically (weights and config first, the manifest last)."""
    if kind not in ("global", "personal"):
        raise ValueError(f"unknown adapter kind {kind!r}")
    folder = Path(folder)
    tmp = folder.with_name(f".tmp-{folder.name}-{time.time_ns()}")
    tmp.mkdir(parents=True)
    try:
        arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
        save_numpy_file(arrays, str(tmp / ADAPTER_WEIGHTS))
        atomic_write_json(tmp / ADAPTER_CONFIG, lora_config)
        manifest = {
            "format": MANIFEST_FORMAT,
            "kind": kind,
            "version": version,
            "base_fingerprint": base,
            "sha256": _sha256(tmp / ADAPTER_WEIGHTS),
            "tensors": len(arrays),
            "created": time.time(),
            **(dict(extra) if extra else {}),
        }
        atomic_write_json(tmp / MANIFEST, manifest)
        if folder.exists():
            # Replacing a folder is two renames; the old copy is kept until the new one is in place.
            old = folder.with_name(f".old-{folder.name}-{time.time_ns()}")
            folder.rename(old)
            tmp.rename(folder)
            _rmtree(old)
        else:
            tmp.rename(folder)
    finally:
        if tmp.exists():
            _rmtree(tmp)
    return AdapterFolder(folder, kind, version, manifest)


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
    if not weights.is_file() or _sha256(weights) != manifest.get("sha256"):
        raise AdapterError(f"The adapter weights in {path} are missing or do not match their manifest.")
    return AdapterFolder(path, str(manifest.get("kind")), manifest.get("version"), manifest)


def load_tensors(adapter: AdapterFolder) -> dict[str, np.ndarray]:
    return dict(load_numpy_file(str(adapter.path / ADAPTER_WEIGHTS)))


def apply_adapters(
    base_lm: CausalLM,
    global_dir: str | Path | None,
    personal_dir: str | Path | None = None,
    *,
    expect_version: int | None = None,
    inplace: bool = False,
) -> CausalLM:
    """`base_lm` with the global adapter (and the personal one, if given) merged into its weights.

    Returns a plain transformers model (no peft wrappers), so the engine's KV-cache code runs on it
    unchanged and at base-model speed. LoRA deltas add up, so merging global then personal equals
    running both adapters side by side. `expect_version` is the session's declared
    ``adapter_version``: a global folder of another version raises `AdapterError`. With
    ``inplace=False`` (the default) `base_lm` is left untouched.
    """
    from peft import PeftModel

    if global_dir is None and personal_dir is None:
        return base_lm
    fingerprint = base_fingerprint(base_lm.model)
    folders: list[tuple[str, AdapterFolder]] = []
    if global_dir is not None:
        folders.append(("global", read_adapter(global_dir, kind="global", version=expect_version)))
    elif expect_version is not None:
        raise AdapterError(f"Adapter version v{expect_version} was declared but no global adapter was given.")
    if personal_dir is not None:
        folders.append(("personal", read_adapter(personal_dir, kind="personal")))
    for _, folder in folders:
        if folder.base != fingerprint:
            raise AdapterError(
                f"The adapter in {folder.path} was trained for another base model "
                f"(fingerprint {folder.base}, this model {fingerprint})."
            )

    model = base_lm.model if inplace else copy.deepcopy(base_lm.model)
    # Adapters are created on the model's device before loading, as peft expects (CPU here).
    model.to("cpu")
    for name, folder in folders:
        try:
            wrapped = PeftModel.from_pretrained(model, str(folder.path), adapter_name=name, is_trainable=False)
        except Exception as exc:  # peft raises many types for a config that does not fit the model
            raise AdapterError(f"Cannot load the {name} adapter in {folder.path}: {_one_line(exc)}.") from exc
        model = wrapped.merge_and_unload()
    label = base_lm.name
    for name, folder in folders:
        label += f"+global-v{folder.version}" if name == "global" else "+personal"
    return CausalLM.from_parts(label, model, base_lm.tokenizer)


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


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.rstrip(".")[:300]
