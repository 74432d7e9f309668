"""Writing adapter folders; reading them and merging them into a model is `core.adapters`.

The folder layout, the manifest and `apply_adapters` (what the device and the cloud verifier
need for inference) live in `core.adapters` so that neither `sdk` nor `server` imports
`federation`. This module adds the writing side, which only federated training needs: the
weights and config first, the manifest last, the whole folder renamed into place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save as save_numpy

from specsteer.core.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    MANIFEST,
    MANIFEST_FORMAT,
    AdapterError,
    AdapterFolder,
    apply_adapters,
    base_fingerprint,
    load_tensors,
    read_adapter,
    sha256_file,
)
from specsteer.core.fileio import atomic_write
from specsteer.federation.budget_ledger import atomic_write_json

__all__ = [
    "ADAPTER_WEIGHTS",
    "MANIFEST",
    "AdapterError",
    "AdapterFolder",
    "apply_adapters",
    "base_fingerprint",
    "load_tensors",
    "read_adapter",
    "write_adapter",
]

Seal = Callable[[Path, bytes], None]  # writes the weights file sealed (federation.atrest.seal_file)


def write_adapter(
    folder: Path,
    tensors: Mapping[str, np.ndarray],
    lora_config: dict[str, Any],
    *,
    kind: str,
    base: str,
    version: int | None = None,
    extra: Mapping[str, Any] | None = None,
    seal: Seal | None = None,
) -> AdapterFolder:
    """Write an adapter folder atomically (weights and config first, the manifest last).

    With `seal`, the weights file is written by ``seal(path, safetensors bytes)``: the device's
    personal adapter is encrypted at rest with the key that opens its sealed history.
    """
    if kind not in ("global", "personal"):
        raise ValueError(f"unknown adapter kind {kind!r}")
    folder = Path(folder)
    tmp = folder.with_name(f".tmp-{folder.name}-{time.time_ns()}")
    tmp.mkdir(parents=True)
    try:
        arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
        raw = save_numpy(arrays)
        if seal is not None:
            seal(tmp / ADAPTER_WEIGHTS, raw)
        else:
            atomic_write(tmp / ADAPTER_WEIGHTS, raw)
        atomic_write_json(tmp / ADAPTER_CONFIG, lora_config)
        manifest = {
            "format": MANIFEST_FORMAT,
            "kind": kind,
            "version": version,
            "base_fingerprint": base,
            "sha256": sha256_file(tmp / ADAPTER_WEIGHTS),
            "tensors": len(arrays),
            "created": time.time(),
            **({"sealed": True} if seal is not None else {}),
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


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
