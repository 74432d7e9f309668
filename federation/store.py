"""The server's versioned global adapters: ``<state>/adapters/v<N>/``, one folder per version.

Version 0 is the initial adapter (random A, zero B: exactly the base model). Each aggregated
round writes version N+1 before the next round starts, so a server that is killed mid-run and
restarted resumes from the newest complete version; folders are written under a temporary name
and renamed, and a folder without a manifest is ignored.

The reading side (layout, latest version, `load_global_adapter`, `load_device_specialist`) is
`core.adapters`, shared with the device SDK and the cloud verifier; this adds saving versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specsteer.core.adapters import (
    MAX_VERSION,
    AdapterError,
    AdapterFolder,
    adapter_versions,
    latest_version,
    load_device_specialist,
    load_global_adapter,
    load_tensors,
    version_dir,
)
from specsteer.federation.adapters import write_adapter

__all__ = ["MAX_VERSION", "AdapterStore", "load_device_specialist", "load_global_adapter", "version_dir"]


class AdapterStore:
    """Versioned global adapters under one folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def versions(self) -> list[int]:
        """Complete versions, ascending (folders without a manifest are interrupted writes)."""
        return adapter_versions(self.root)

    def latest(self) -> int | None:
        return latest_version(self.root)

    def get(self, version: int) -> AdapterFolder:
        return load_global_adapter(version, self.root)

    def arrays(self, version: int) -> dict[str, np.ndarray]:
        return load_tensors(self.get(version))

    def save(
        self,
        version: int,
        tensors: Mapping[str, np.ndarray],
        lora_config: dict[str, Any],
        *,
        base: str,
        extra: Mapping[str, Any] | None = None,
    ) -> AdapterFolder:
        if version in self.versions():
            # Versions are immutable: a device and the verifier agreeing on N must mean the same weights.
            raise AdapterError(f"Global adapter v{version} already exists in {self.root}.")
        self.root.mkdir(parents=True, exist_ok=True)
        return write_adapter(
            version_dir(self.root, version),
            tensors,
            lora_config,
            kind="global",
            base=base,
            version=version,
            extra=extra,
        )
