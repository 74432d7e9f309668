"""A device's federation state on disk, read without torch: where the adapters live, which global
version is newest, the name a Specialist with them merged goes by, and a fingerprint of the files.

`core.adapters` loads and merges the adapters (torch, peft); this is what a device process that
drafts on a cached conversion of the merged model needs to find that conversion, so it need not
import torch to merge the same adapters again.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "GLOBAL",
    "MANIFEST",
    "MAX_VERSION",
    "PERSONAL",
    "adapter_label",
    "adapter_versions",
    "latest_version",
    "state_fingerprint",
    "state_folders",
    "version_dir",
]

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
MANIFEST = "manifest.json"
GLOBAL = "global"
PERSONAL = "personal"
MAX_VERSION = 2**31 - 1  # the session parameter is bounded by core.session_types.MAX_ADAPTER_VERSION
_VERSION_DIR = re.compile(r"^v(\d+)$")


def version_dir(adapters_dir: str | Path, version: int) -> Path:
    return Path(adapters_dir) / f"v{int(version)}"


def adapter_versions(adapters_dir: str | Path) -> list[int]:
    """Complete global versions under `adapters_dir`, ascending (folders without a manifest are interrupted writes)."""
    root = Path(adapters_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _VERSION_DIR.match(child.name)
        if match and (child / MANIFEST).is_file():
            found.append(int(match.group(1)))
    return sorted(found)


def latest_version(adapters_dir: str | Path) -> int | None:
    """The newest complete global version under `adapters_dir`, or None when there is none."""
    versions = adapter_versions(adapters_dir)
    return versions[-1] if versions else None


def adapter_label(base_name: str, global_version: int | None, personal: bool) -> str:
    """The name of `base_name` with the adapters merged in (`core.adapters.apply_adapters` names it so)."""
    label = base_name
    if global_version is not None:
        label += f"+global-v{global_version}"
    if personal:
        label += "+personal"
    return label


def state_folders(state_dir: str | Path) -> tuple[int | None, Path | None, Path | None]:
    """The newest global version, its folder and the personal adapter's folder, each None if absent."""
    state = Path(state_dir)
    version = latest_version(state / GLOBAL)
    personal = state / PERSONAL
    global_dir = None if version is None else version_dir(state / GLOBAL, version)
    return version, global_dir, (personal if personal.is_dir() else None)


def state_fingerprint(state_dir: str | Path) -> str:
    """sha256 of the adapters a device merges: each file's role, name and bytes, newest global
    version first, then the personal adapter. The same files give the same merged weights."""
    digest = hashlib.sha256(b"specsteer-adapters-v1\0")
    for role, folder in zip((GLOBAL, PERSONAL), state_folders(state_dir)[1:], strict=True):
        if folder is None:
            digest.update(f"{role}:none\0".encode())
            continue
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(f"{role}:{path.relative_to(folder).as_posix()}\0".encode())
            with path.open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()
