"""The device's pin set: which TLS anchors it trusts for the verifier, and nothing else.

A pins file holds OkHttp-style pins, one per line, and the anchor certificates they name (PEM
blocks, in the same file or in a separate bundle):

    # comments and blank lines are ignored; text after a pin on its line is a comment too
    sha256/r/mIkG3eEpVdm+u/ko/cwxzOMo1bk4TyHIlByibiA5E=  # serving CA
    sha256/YLh1dUR9y6Kja30RrAn7JKnbQG/uEtLMkBgFF2Fuihg=  # backup anchor, key kept offline
    -----BEGIN CERTIFICATE-----
    ...

A pin is `sha256/` + base64 of the SHA-256 of a certificate's DER SubjectPublicKeyInfo. gRPC's
`ssl_channel_credentials(root_certificates=...)` turns every certificate it is given into a trust
anchor, so the pinning mechanism is: hand gRPC exactly the pinned anchors, after checking that
every anchor is pinned and every pin names an anchor. Anything else fails closed with
`PinningError`: fewer than two pins (one must be a backup), a malformed pin or certificate, a
certificate nobody pinned, a pin with no certificate.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from specsteer.core.errors import ConfigError
from specsteer.core.pins import spki_pin
from specsteer.core.tls_identity import read_tls_file

__all__ = ["MIN_PINS", "PinSet", "PinningError", "load_pin_set", "spki_pin"]

MIN_PINS = 2  # a serving anchor and at least one backup, so a CA change never strands devices
_PIN = re.compile(r"sha256/([A-Za-z0-9+/]{43}=)")
_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----\r?\n?", re.S)


class PinningError(ConfigError):
    """The pin set or its anchors cannot be trusted as given; nothing is sent."""


@dataclass(frozen=True)
class PinSet:
    """Pins and the anchor certificates they name; `root_pem` is what gRPC gets as its roots."""

    pins: tuple[str, ...]
    anchors: tuple[x509.Certificate, ...]

    @property
    def root_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.anchors)

    @classmethod
    def from_parts(cls, pins: list[str], anchors: list[x509.Certificate], source: str) -> PinSet:
        """Check that pins and anchors name each other one to one; raise `PinningError` otherwise."""
        if len(set(pins)) != len(pins):
            raise PinningError(f"{source} lists a pin twice")
        if len(pins) < MIN_PINS:
            raise PinningError(
                f"{source} has {len(pins)} pin(s); at least {MIN_PINS} are required (a serving anchor and a backup)"
            )
        # A pinned key may stand in several certificates (a CA's renewed certificate beside the one
        # it replaces): each is an anchor, or a renewal would be dropped for the older one.
        by_pin: dict[str, list[x509.Certificate]] = {}
        for cert in anchors:
            pin = spki_pin(cert)
            if pin not in pins:
                raise PinningError(f"anchor certificate '{cert.subject.rfc4514_string()}' in {source} is not pinned")
            if cert not in by_pin.setdefault(pin, []):
                by_pin[pin].append(cert)
        unnamed = [p for p in pins if p not in by_pin]
        if unnamed:
            raise PinningError(f"pin {unnamed[0]} in {source} names no anchor certificate")
        return cls(tuple(pins), tuple(cert for p in pins for cert in by_pin[p]))


def _parse_pins(text: str, source: str) -> list[str]:
    pins: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.fullmatch(line.split()[0])
        if match is None or len(line.split()) > 1:
            raise PinningError(f"{source} line {number} is not a pin sha256/<base64 SHA-256>: {line[:60]!r}")
        try:
            if len(base64.b64decode(match.group(1), validate=True)) != 32:
                raise ValueError
        except (binascii.Error, ValueError):
            raise PinningError(f"{source} line {number} does not hold a 32-byte SHA-256 digest") from None
        pins.append(match.group(0))
    return pins


def _parse_certs(data: bytes, source: str) -> list[x509.Certificate]:
    certs: list[x509.Certificate] = []
    for block in _PEM_BLOCK.findall(data):
        try:
            certs.append(x509.load_pem_x509_certificate(block))
        except ValueError as exc:
            raise PinningError(f"a certificate in {source} does not parse: {exc}") from None
    return certs


def load_pin_set(pins_path: Path, anchors_path: Path | None = None) -> PinSet:
    """Read a pins file (pins + anchor PEM blocks) and, optionally, a separate anchor bundle."""
    try:
        data = read_tls_file(pins_path, "trust")
        extra = read_tls_file(anchors_path, "trust") if anchors_path is not None else b""
    except ConfigError as exc:
        raise PinningError(str(exc)) from None
    # Pins live outside PEM blocks; everything inside them is certificate material.
    try:
        text = _PEM_BLOCK.sub(b"", data).decode("ascii")
    except UnicodeDecodeError:
        raise PinningError(f"{pins_path} is not an ASCII pins file") from None
    if "-----BEGIN" in text:
        raise PinningError(f"{pins_path} holds a PEM block that is not a certificate (or is cut short)")
    pins = _parse_pins(text, str(pins_path))
    anchors = _parse_certs(data, str(pins_path)) + _parse_certs(extra, str(anchors_path))
    if anchors_path is not None and not _parse_certs(extra, str(anchors_path)):
        raise PinningError(f"{anchors_path} holds no PEM certificate")
    return PinSet.from_parts(pins, anchors, str(pins_path))
