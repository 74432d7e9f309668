"""The privacy package's errors, under `core.errors.SpecSteerError` so one `except` in a CLI catches all.

SpecSteerError             core.errors, the root of every package's errors
└── PrivacyError           a privacy tool's input cannot be used; the message names the file and why
    ├── VaultError         an encrypted profile vault cannot be read, written or authenticated
    │   └── WrongKeyError  the key or passphrase is not the one the vault was sealed with
    └── LedgerError        a device's DP ledger is damaged, or its ε cannot be recomputed
        (also a ConfigError: the federation's device refuses a round on it)

Every privacy error is defined here; `privacy.data` and `privacy.vault` import them from here
(and still export them, so older imports keep working).
"""

from __future__ import annotations

from specsteer.core.errors import ConfigError, SpecSteerError

__all__ = ["LedgerError", "PrivacyError", "VaultError", "WrongKeyError"]


class PrivacyError(SpecSteerError):
    """A privacy tool's input cannot be used; the message names the file and the reason."""


class VaultError(PrivacyError):
    """The vault cannot be read, written or authenticated."""


class WrongKeyError(VaultError):
    """The key (or passphrase) is not the one the vault was sealed with."""


class LedgerError(PrivacyError, ConfigError):
    """A device's privacy ledger is damaged or unreadable, or its ε cannot be recomputed."""
