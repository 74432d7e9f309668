"""A TLS identity (certificate chain and key), checked when it is loaded, before anything dials or serves.

Both ends use it: the device for its client certificate, the verifier for its serving one. gRPC
reads them only when it dials or handshakes, and a key that does not match its certificate (or a
file that is not PEM at all) then reads as a dead peer: core logs "Invalid private key" and the
channel fails like a network outage, so a device would fall back and exit 0. A local
misconfiguration must fail closed instead, with one sentence naming the files (`ConfigError`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from core.errors import ConfigError

__all__ = ["check_tls_identity"]

_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def check_tls_identity(
    cert_pem: bytes, key_pem: bytes, *, cert_path: Path, key_path: Path, now: dt.datetime | None = None
) -> None:
    """Refuse (`ConfigError`) a certificate chain and key that cannot authenticate their holder:
    not PEM, a key that is not the certificate's, or a certificate outside its validity dates."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError:
        raise ConfigError(f"{cert_path} holds no PEM certificate that can be read") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise ConfigError(f"{key_path} is encrypted; the key must be unencrypted (file mode 0600)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(f"{key_path} holds no PEM private key that can be read") from None
    leaf = chain[0]
    if key.public_key().public_bytes(*_SPKI) != leaf.public_key().public_bytes(*_SPKI):
        raise ConfigError(f"the key in {key_path} is not the key of the certificate in {cert_path}")
    now = now or dt.datetime.now(dt.UTC)
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        raise ConfigError(
            f"the certificate in {cert_path} is not valid now: it is valid from "
            f"{leaf.not_valid_before_utc:%Y-%m-%d %H:%M} to {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
