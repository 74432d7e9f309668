"""A small, working PKI for the verifier and its devices, made with `cryptography`.

`server pki init --dir D` writes:

    D/ca.pem, D/ca.key                 serving CA: signs the verifier's certificate
    D/backup-ca.pem, D/backup-ca.key   backup anchor: pinned by devices, signs nothing yet; keep
                                       its key offline. If the serving CA is lost or compromised,
                                       the verifier switches to a chain under it, no device update.
    D/server.pem, D/server.key         the verifier's leaf (localhost, 127.0.0.1, ::1) + chain
    D/device-ca.pem, D/device-ca.key   signs device client certificates; the server trusts only it
    D/pins.txt                         the device's pin set: one OkHttp-style `sha256/<base64 SPKI>`
                                       per anchor, followed by the anchor certificates themselves

`server pki issue-device --dir D --name NAME` adds D/devices/NAME.pem and NAME.key.

The serving and device CAs are distinct on purpose: a device certificate can never pass as the
verifier, and a leaked server key cannot impersonate a device. Keys are ECDSA P-256, written 0600;
a CA whose key is weaker (RSA below 2048 bits, EC below P-256: `core.tls_identity.weak_key`) is
refused as an issuer.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specsteer.core.errors import ConfigError
from specsteer.core.fileio import atomic_write
from specsteer.core.pins import spki_pin
from specsteer.core.tls_identity import KEY_RULE, host_name, weak_key
from specsteer.server.errors import PkiError

__all__ = [
    "DEVICE_NAME",
    "Issued",
    "Pki",
    "PkiError",
    "init_pki",
    "issue_device",
    "issue_leaf",
    "load_issued",
    "new_ca",
    "pins_file_text",
    "rotate_server",
    "write_issued",
]

DEVICE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
SERVER_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
CA_DAYS = 3650
LEAF_DAYS = 397  # the CA/Browser Forum's ceiling for a leaf: rotation is routine, not an event


@dataclass(frozen=True)
class Issued:
    """A certificate, its private key, and the chain above it (not including the trust anchor)."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def cert_pem(self) -> bytes:
        return _pem(self.cert)

    @property
    def chain_pem(self) -> bytes:
        """Leaf followed by its intermediates: what a TLS server presents."""
        return b"".join(_pem(c) for c in (self.cert, *self.chain))

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _name(common_name: str, org: str = "SpecSteer") -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )


def _usage(*, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(common_name: str, *, days: int = CA_DAYS, not_before: dt.datetime | None = None) -> Issued:
    """A self-signed CA that may sign leaves only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or _now() - dt.timedelta(minutes=5)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def _server_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    """The names a server certificate is for, each a DNS name or IP address (`PkiError` otherwise):
    a wildcard, a blank or a network range must not be written into a certificate."""
    if not hosts:
        raise PkiError("a server certificate needs at least one host name")
    try:
        return tuple(host_name(host, "a server host (--host)") for host in hosts)
    except ConfigError as exc:
        raise PkiError(str(exc)) from None


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_leaf(
    issuer: Issued | None,
    common_name: str,
    *,
    hosts: Sequence[str] = (),
    client: bool = False,
    days: int = LEAF_DAYS,
    not_before: dt.datetime | None = None,
    subject: x509.Name | None = None,
) -> Issued:
    """A leaf for a server (`hosts` become its SANs) or a device (`client=True`).

    `issuer=None` makes it self-signed: tests use that to impersonate a real server's subject.
    `not_before` and `days` let tests build expired certificates.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or _now() - dt.timedelta(minutes=5)
    subject = subject or _name(common_name)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # A leaf signs its TLS handshakes and nothing else (the device verifier checks this).
        .add_extension(_usage(digital_signature=True), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
        )
    cert = builder.sign(issuer.key if issuer else key, hashes.SHA256())
    return Issued(cert, key, ())


def pins_file_text(anchors: Sequence[tuple[str, x509.Certificate]]) -> str:
    """The device's pin set: one labelled pin per anchor, then the anchors' certificates."""
    lines = [
        "# SpecSteer verifier pin set. The device trusts exactly these anchors and refuses to connect",
        "# if a certificate below is not pinned or a pin names no certificate below.",
        "# Pin = sha256/<base64 of SHA-256 over the anchor's SubjectPublicKeyInfo> (OkHttp style).",
    ]
    lines += [f"{spki_pin(cert)}  # {label}" for label, cert in anchors]
    lines.append("")
    return "\n".join(lines) + "".join(_pem(cert).decode() for _, cert in anchors)


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    # Atomic, so a running server reloading its certificate never reads half a file.
    atomic_write(path, data, mode=0o600 if private else 0o644)


def write_issued(directory: Path, stem: str, issued: Issued) -> tuple[Path, Path]:
    """Write `stem.pem` (leaf + chain) and `stem.key` (0600); return their paths.

    The key goes first: a reloading server that sees a new certificate finds its key in place.
    """
    key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.pem"
    _write(key_path, issued.key_pem, private=True)
    _write(cert_path, issued.chain_pem)
    return cert_path, key_path


def load_issued(directory: Path, stem: str) -> Issued:
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    try:
        certs = x509.load_pem_x509_certificates(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise PkiError(f"{exc.filename} does not exist: run `server pki init --dir {directory}` first") from None
    except ValueError as exc:
        raise PkiError(f"{cert_path} or {key_path} is not a PEM certificate and key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{key_path} is not an ECDSA key")
    weak = weak_key(key) or weak_key(certs[0].public_key())
    if weak is not None:  # a CA key this weak would lend its weakness to every certificate it signs
        raise PkiError(f"{key_path} or {cert_path} holds {weak}, too weak to issue with: a key must be {KEY_RULE}")
    return Issued(certs[0], key, tuple(certs[1:]))


@dataclass(frozen=True)
class Pki:
    """Paths of an initialised PKI directory."""

    directory: Path

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def device_ca(self) -> Path:
        return self.directory / "device-ca.pem"

    @property
    def pins(self) -> Path:
        return self.directory / "pins.txt"

    def device_cert(self, name: str) -> Path:
        return self.directory / "devices" / f"{name}.pem"

    def device_key(self, name: str) -> Path:
        return self.directory / "devices" / f"{name}.key"


def init_pki(directory: Path, *, hosts: Sequence[str] = SERVER_HOSTS) -> Pki:
    """Create a dev PKI in `directory` (created if missing; refused if it already holds one)."""
    directory = Path(directory)
    hosts = _server_hosts(hosts)  # before anything is created
    if (directory / "ca.key").exists() or (directory / "pins.txt").exists():
        raise PkiError(f"{directory} already holds a PKI; pick an empty directory")
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        (directory / "devices").mkdir(exist_ok=True, mode=0o700)
    except OSError as exc:
        raise PkiError(f"cannot create {directory}: {exc.strerror}") from None
    ca = new_ca("SpecSteer Dev Serving CA")
    backup = new_ca("SpecSteer Backup Anchor")
    device_ca = new_ca("SpecSteer Device CA")
    server = issue_leaf(ca, "specsteer-verifier", hosts=hosts)
    write_issued(directory, "ca", ca)
    write_issued(directory, "backup-ca", backup)
    write_issued(directory, "device-ca", device_ca)
    write_issued(directory, "server", server)
    _write(directory / "pins.txt", pins_file_text([("serving CA", ca.cert), ("backup anchor", backup.cert)]).encode())
    return Pki(directory)


def issue_device(directory: Path, name: str) -> tuple[Path, Path]:
    """Issue a client certificate for device `name` under the PKI in `directory`."""
    if not DEVICE_NAME.fullmatch(name):
        raise PkiError(f"a device name is 1-63 lowercase letters, digits or '-' (not first); got {name!r}")
    directory = Path(directory)
    device_ca = load_issued(directory, "device-ca")
    devices = directory / "devices"
    devices.mkdir(exist_ok=True, mode=0o700)
    if (devices / f"{name}.pem").exists():
        raise PkiError(f"device {name!r} already has a certificate in {devices}")
    return write_issued(devices, name, issue_leaf(device_ca, name, client=True))


def rotate_server(directory: Path, *, issuer: str = "ca", hosts: Sequence[str] = SERVER_HOSTS) -> Path:
    """Issue a fresh server leaf under `issuer` ("ca" or "backup-ca") and swap it in place.

    A running verifier notices the new files on its next handshake; no restart.
    """
    if issuer not in ("ca", "backup-ca"):
        raise PkiError(f"the server certificate is issued by 'ca' or 'backup-ca'; got {issuer!r}")
    hosts = _server_hosts(hosts)
    directory = Path(directory)
    ca = load_issued(directory, issuer)
    cert_path, _ = write_issued(directory, "server", issue_leaf(ca, "specsteer-verifier", hosts=hosts))
    return cert_path
