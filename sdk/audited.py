"""The device's audit log, opened for a client: every uplink's bytes recorded before they are sent.

`open_audit_tap` is what `SpecSteerClient.connect` (and so `sdk generate --audit-log`) runs when
the client's config names an audit log: the log binds its key to the device's mutual-TLS
certificate (so an auditor compares it with only this device's streams in the verifier's
transcript), and with the witness's public key each Close is proved from the last cosignature that
verifies under it (docs/audit-format.md, §8). Only the device's writing side of `audit` is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specsteer.core.errors import ConfigError
from specsteer.sdk.egress import EgressTap

__all__ = ["check_audit_settings", "open_audit_tap"]


def check_audit_settings(log_dir: Path | None, key_path: Path | None, witness_key: Path | None) -> None:
    """A key or witness key without a log, or a log without its key, is a `ConfigError`."""
    if log_dir is None:
        if key_path is not None or witness_key is not None:
            what = "an audit key" if key_path is not None else "a witness key"
            raise ConfigError(f"{what} is for an audit log: set the audit log folder too (--audit-log DIR)")
        return
    if key_path is None:
        raise ConfigError("an audit log needs its signing key (--audit-key; create one with: audit keygen)")


@contextmanager
def open_audit_tap(
    log_dir: Path, key_path: Path, cert: Path | None = None, witness_key: Path | None = None
) -> Iterator[EgressTap]:
    """The egress tap that writes the audit log at `log_dir`, signed with the key at `key_path`;
    the log is closed (its last checkpoint signed) when the block ends."""
    check_audit_settings(log_dir, key_path, witness_key)
    from specsteer.audit.cosignature import load_witness_key
    from specsteer.audit.errors import AuditError
    from specsteer.audit.identity import DeviceIdentity
    from specsteer.audit.log import AuditLog
    from specsteer.audit.note import load_signing_key
    from specsteer.audit.recorder import EgressRecorder

    try:
        device = None if cert is None else DeviceIdentity.from_pem(Path(cert).read_bytes())
        witness = None if witness_key is None else load_witness_key(witness_key)
        with AuditLog.open(log_dir, load_signing_key(key_path), device=device, witness_key=witness) as log:
            yield EgressRecorder(log)
    except AuditError as exc:
        raise ConfigError(f"audit log {log_dir}: {exc}") from None
