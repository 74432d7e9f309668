"""The server's versioned global adapters: ``<state>/adapters/v<N>/``, one folder per version.

Version 0 is the initial adapter (random A, zero B: exactly the base model). Each aggregated
round writes version N+1 before the next round starts, so a server that is killed mid-run and
restarted resumes from the newest complete version; folders are written under a temporary name
and renamed, and a folder without a manifest is ignored.

`load_global_adapter(version, adapters_dir)` is what the cloud verifier calls with the session's
declared ``adapter_version``; the device calls the same function on its own copy of the versions
it received (``<device state>/global``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.models import CausalLM
from federation.adapters import (
    AdapterError,
    AdapterFolder,
    apply_adapters,
    load_tensors,
    read_adapter,
    write_adapter,
)
from federation.task import GLOBAL, PERSONAL

__all__ = ["AdapterStore", "load_global_adapter", "version_dir"]

_VERSION_DIR = re.compile(r"^v(\d+)$")
MAX_VERSION = 2**31 - 1  # the session parameter is bounded by core.session_types.MAX_ADAPTER_VERSION


def version_dir(adapters_dir: str | Path, version: int) -> Path:
    return Path(adapters_dir) / f"v{int(version)}"


def load_global_adapter(version: int, adapters_dir: str | Path) -> AdapterFolder:
    """The validated folder of global adapter `version`; an `AdapterError` if it is absent or damaged.

    Pass the result's ``.path`` to `federation.adapters.apply_adapters` with ``expect_version=version``.
    """
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
        raise AdapterError(f"An adapter version is an integer in [0, {MAX_VERSION}], not {version!r}.")
    folder = version_dir(adapters_dir, version)
    if not folder.is_dir():
        have = AdapterStore(adapters_dir).versions()
        known = f"available: v{have[0]}..v{have[-1]}" if have else "none available"
        raise AdapterError(f"Global adapter v{version} is not in {adapters_dir} ({known}).")
    return read_adapter(folder, kind="global", version=version)


class AdapterStore:
    """Versioned global adapters under one folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def versions(self) -> list[int]:
        """Complete versions, ascending (folders without a manifest are interrupted writes)."""
        if not self.root.is_dir():
            return []
        found = []
        for child in self.root.iterdir():
            match = _VERSION_DIR.match(child.name)
            if match and (child / "manifest.json").is_file():
                found.append(int(match.group(1)))
        return sorted(found)

    def latest(self) -> int | None:
        versions = self.versions()
        return versions[-1] if versions else None

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


def load_device_specialist(base: CausalLM, state_dir: str | Path) -> tuple[CausalLM, int]:
    """A device's Specialist for inference: `base` + its newest global adapter + its personal one.

    Returns the merged model and the global version to declare as the session's ``adapter_version``
    (0, the base weights, when the device holds no global adapter yet). The verifier merges the
    same global version into its generic copy, so both sides score with the same P_S^0 weights.
    """
    state = Path(state_dir)
    if not state.is_dir():
        raise AdapterError(f"The federation state folder {state} does not exist.")
    version = AdapterStore(state / GLOBAL).latest()
    global_dir = None if version is None else version_dir(state / GLOBAL, version)
    personal = state / PERSONAL
    personal_dir = personal if personal.is_dir() else None
    lm = apply_adapters(base, global_dir, personal_dir, expect_version=version)
    return lm, version or 0
