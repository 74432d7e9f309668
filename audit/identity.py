"""A device's identity as both ends of mutual TLS see it: its certificate's name and SHA-256.

The server learns a device from the client certificate its TLS stack verified; the device knows
its own certificate file. Both compute the same `DeviceIdentity` from the certificate (the first
one in a chain), so the device's audit log can bind its log key to the certificate, and the
server's transcript can say which certificate sent each stream: `audit verify` compares a log only
with the streams of the certificate(s) that log binds.

The fingerprint is the SHA-256 of the certificate's DER encoding (as `openssl x509 -fingerprint
-sha256` prints it, lowercase hex without colons), never of its PEM text, whose line breaks and
headers vary between tools.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from specsteer.audit.errors import AuditError


@dataclass(frozen=True)
class DeviceIdentity:
    """`name` is the certificate's common name; `cert_sha256` its DER SHA-256, lowercase hex."""

    name: str
    cert_sha256: str

    @classmethod
    def from_pem(cls, pem: bytes) -> DeviceIdentity:
        """The identity of the first certificate in `pem` (a device's chain starts with its own)."""
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as exc:
            raise AuditError(f"the device certificate does not parse: {exc}") from None
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        name = str(names[0].value) if len(names) == 1 else ""
        if not name or not name.isprintable() or len(name) > 128:
            raise AuditError("the device certificate must name the device in exactly one common name")
        return cls(name, cert_sha256(cert))


def cert_sha256(cert: x509.Certificate | bytes) -> str:
    """SHA-256 of a certificate's DER encoding; `cert` may be a parsed certificate or PEM bytes."""
    if isinstance(cert, bytes):
        try:
            cert = x509.load_pem_x509_certificate(cert)
        except ValueError as exc:
            raise AuditError(f"the certificate does not parse: {exc}") from None
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()
