"""A federation device's data at rest: one key provider for its history, personal adapter and log.

A device whose history is sealed (`privacy seal`) keeps everything else it derives from that
history encrypted with the same key: the personal adapter's weights (a vault in place of the
safetensors file; `core.adapters` opens it in memory), its round log (``rounds.vault``) and its
ε ledger (a vault with a sealed counter of writes beside it: `federation.budget_ledger`). A
device whose history is plaintext gains nothing from encrypting what is derived from it, and its
personal adapter and log stay plaintext, as before.

The key comes from the device's environment, as the SDK's: ``$SPECSTEER_VAULT_KEY`` (a raw key)
or ``$SPECSTEER_VAULT_PASSPHRASE`` (scrypt). A passphrase costs one scrypt derivation per salt,
so the provider is cached per process: one derivation to open the history, one for the salt the
device's own files are sealed under, however many messages a run sends.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specsteer.core.errors import ProfileError
from specsteer.privacy.vault import (
    ENV_KEY,
    ENV_PASSPHRASE,
    KeyProvider,
    ProfileVault,
    VaultError,
    environment_key_provider,
    is_vault,
)

__all__ = [
    "CachedKeyProvider",
    "append_sealed_log",
    "device_key_provider",
    "read_sealed_log",
    "seal_file",
    "unseal_file",
]


class CachedKeyProvider:
    """A key provider that derives each key once: the same salt for every file it seals."""

    def __init__(self, inner: KeyProvider) -> None:
        self.inner = inner
        self._new: tuple[bytes, dict[str, Any]] | None = None
        self._found: dict[str, bytes] = {}

    def new_key(self) -> tuple[bytes, dict[str, Any]]:
        if self._new is None:
            key, params = self.inner.new_key()
            self._new = (key, params)
            self._found[json.dumps(params, sort_keys=True)] = key
        return self._new[0], dict(self._new[1])

    def key_for(self, params: Mapping[str, Any]) -> bytes:
        tag = json.dumps(dict(params), sort_keys=True)
        if tag not in self._found:
            self._found[tag] = self.inner.key_for(params)
        return self._found[tag]


_PROVIDERS: dict[str, CachedKeyProvider] = {}


def device_key_provider(data_file: Path) -> KeyProvider | None:
    """The key provider of a device whose history is sealed; None for a plaintext history."""
    if not is_vault(data_file):
        return None
    inner = environment_key_provider("the device's history is sealed")
    # Cached by a hash of the secret, so a changed key in the environment is a different provider.
    raw_key = os.environ.get(ENV_KEY)
    secret = f"key:{raw_key}" if raw_key else f"passphrase:{os.environ.get(ENV_PASSPHRASE)}"
    tag = hashlib.sha256(secret.encode("utf-8")).hexdigest()
    if tag not in _PROVIDERS:
        _PROVIDERS[tag] = CachedKeyProvider(inner)
    return _PROVIDERS[tag]


def seal_file(provider: KeyProvider) -> Any:
    """A `write_adapter` writer that seals the weights file with `provider`."""

    def write(path: Path, raw: bytes) -> None:
        ProfileVault.seal(raw, path, provider)

    return write


def unseal_file(provider: KeyProvider | None) -> Any:
    """A `core.adapters.Unseal` that opens sealed weights files with `provider` (None: cannot)."""
    if provider is None:
        return None

    def read(path: Path) -> bytes:
        try:
            return ProfileVault.open(path, provider)
        except VaultError as exc:
            raise ProfileError(f"Cannot open the sealed file {path.name}: {exc}.") from None

    return read


def read_sealed_log(path: Path, provider: KeyProvider) -> list[dict[str, Any]]:
    """The records of a sealed round log (empty if there is none yet)."""
    if not path.exists():
        return []
    try:
        text = ProfileVault.open(path, provider).decode("utf-8")
    except VaultError as exc:
        raise ProfileError(f"Cannot open the device's sealed round log: {exc}.") from None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def append_sealed_log(path: Path, provider: KeyProvider, record: Mapping[str, Any]) -> None:
    """Append one record to the sealed round log (decrypt, append, re-seal atomically)."""
    records = read_sealed_log(path, provider)
    records.append(dict(record))
    text = "".join(json.dumps(r) + "\n" for r in records)
    ProfileVault.seal(text.encode("utf-8"), path, provider)
