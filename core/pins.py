"""Public-key pins, the one fact about certificates that device and verifier share.

A pin is OkHttp's: `sha256/` + base64 of the SHA-256 of a certificate's DER SubjectPublicKeyInfo.
The verifier's PKI writes the pins of its anchors (`server.pki`); the device trusts exactly the
anchors its pins name (`sdk.pinning`). Both compute them here, so they cannot drift apart.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography import x509
from cryptography.hazmat.primitives import serialization

__all__ = ["spki_pin"]


def spki_pin(cert: x509.Certificate) -> str:
    """The OkHttp-style pin of a certificate's public key: sha256/<base64 SPKI digest>."""
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256/" + base64.b64encode(hashlib.sha256(spki).digest()).decode()
