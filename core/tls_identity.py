"""A TLS identity (certificate chain and key), checked when it is loaded, before anything dials or serves.

Both ends use it: the device for its client certificate, the verifier for its serving one. gRPC
reads them only when it dials or handshakes, and a key that does not match its certificate (or a
file that is not PEM at all) then reads as a dead peer: core logs "Invalid private key" and the
channel fails like a network outage, so a device would fall back and exit 0. A local
misconfiguration must fail closed instead, with one sentence naming the files (`ConfigError`).

`read_tls_file` is how both ends read TLS material: only a regular file of at most 1 MiB (a FIFO
would block the start for ever, `/dev/zero` would fill the memory), a private key nobody but its
owner and group can read, and trust material (pins, anchors, client CAs) nobody but its owner
can change: a pins file any local user may write lets that user add a trust anchor. The rules
are OpenSSH's and PostgreSQL's for the same files. `weak_key` is the key-strength rule both ends
apply to certificates (RSA >= 2048 bits, EC on P-256/P-384/P-521, Ed25519/Ed448).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import stat
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from specsteer.core.errors import ConfigError

__all__ = [
    "MAX_TLS_FILE_BYTES",
    "MIN_RSA_BITS",
    "check_client_cas",
    "check_tls_identity",
    "host_name",
    "read_tls_file",
    "weak_key",
]

_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

MAX_TLS_FILE_BYTES = 1 << 20  # a chain of a few certificates is kilobytes

# Permission bits each kind of file must not have.
_FORBIDDEN_BITS = {
    "key": stat.S_IRWXO | stat.S_IWGRP | stat.S_IXGRP,  # no one else reads it (a group may read, as PostgreSQL allows)
    "trust": stat.S_IWOTH | stat.S_IWGRP,  # no one else writes it
    "certificate": 0,
}


def read_tls_file(path: str | Path, kind: Literal["key", "trust", "certificate"]) -> bytes:
    """The bytes of a TLS file; `ConfigError` in one sentence if it is no regular file, too large,
    or (`kind`) a key others can read or trust material others can change or own.

    The file is opened first and the open file checked (`fstat`), so what is read is what was
    checked. O_NONBLOCK: opening a FIFO does not wait for a writer."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        _check_tls_file(path, kind, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_TLS_FILE_BYTES + 1)
    if len(data) > MAX_TLS_FILE_BYTES:
        raise ConfigError(f"{path} is more than {MAX_TLS_FILE_BYTES} bytes, more than any TLS file")
    return data


def _check_tls_file(path: Path, kind: str, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path} is not a regular file")
    if info.st_size > MAX_TLS_FILE_BYTES:
        raise ConfigError(f"{path} is {info.st_size} bytes, more than any TLS file ({MAX_TLS_FILE_BYTES} at most)")
    named = path if not path.is_symlink() else f"{path} (a link to {path.resolve()})"
    if kind != "certificate" and info.st_uid not in (0, os.geteuid()):
        # Its owner could rewrite it whatever its mode: a key it can read, an anchor it can add.
        raise ConfigError(f"{named} belongs to user {info.st_uid}, not to this user or root: chown it")
    mode = stat.S_IMODE(info.st_mode)
    if mode & _FORBIDDEN_BITS[kind]:
        who = "read by other users" if kind == "key" else "changed by other users"
        fix = "chmod 600 it" if kind == "key" else "chmod go-w it"
        # A Kubernetes secret volume is read-only, its files links into "..data", 0644 unless the
        # volume says otherwise: chmod cannot help there.
        mounted = path.is_symlink() and "..data" in os.readlink(path)
        fix += " (a Kubernetes secret volume: set its defaultMode to 0400)" if mounted else ""
        raise ConfigError(f"{named} can be {who} (mode {mode:04o}): {fix}")


_PURPOSE = {
    "client": (x509.ExtendedKeyUsageOID.CLIENT_AUTH, "clientAuth", "a device"),
    "server": (x509.ExtendedKeyUsageOID.SERVER_AUTH, "serverAuth", "the verifier"),
}


def check_tls_identity(
    cert_pem: bytes,
    key_pem: bytes,
    *,
    cert_path: Path,
    key_path: Path,
    role: Literal["client", "server"],
    now: dt.datetime | None = None,
) -> None:
    """Refuse (`ConfigError`) a certificate chain and key that cannot authenticate their holder:
    not PEM, a key that is not the certificate's, a certificate outside its validity dates, or one
    not for this `role` (a CA's certificate; an extended key usage without clientAuth/serverAuth).
    Any of these would only show at the first handshake, read there as a peer's refusal."""
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
    spki = key.public_key().public_bytes(*_SPKI)
    if spki != leaf.public_key().public_bytes(*_SPKI):
        if any(spki == cert.public_key().public_bytes(*_SPKI) for cert in chain[1:]):
            raise ConfigError(
                f"{cert_path} lists its certificates out of order: the certificate of the key in {key_path} "
                "must come first, then its issuers"
            )
        raise ConfigError(f"the key in {key_path} is not the key of the certificate in {cert_path}")
    weak = weak_key(leaf.public_key())
    if weak is not None:
        raise ConfigError(f"the certificate in {cert_path} has {weak}, too weak: a TLS key must be {KEY_RULE}")
    now = now or dt.datetime.now(dt.UTC)
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        raise ConfigError(
            f"the certificate in {cert_path} is not valid now: it is valid from "
            f"{leaf.not_valid_before_utc:%Y-%m-%d %H:%M} to {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    usage, usage_name, holder = _PURPOSE[role]
    if _is_ca(leaf):
        raise ConfigError(f"the certificate in {cert_path} is a CA's certificate, not one {holder} can present")
    try:
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    if usage not in usages:
        raise ConfigError(
            f"the certificate in {cert_path} is not for {holder}: its extended key usage does not allow {usage_name}"
        )


MIN_RSA_BITS = 2048
# EC keys on these curves only: P-256 and stronger (NIST SP 800-57's 128-bit floor, the Web PKI's set).
STRONG_CURVES = frozenset({"secp256r1", "secp384r1", "secp521r1"})


def weak_key(key: object) -> str | None:
    """What is too weak about a certificate's public key, as "an RSA-1024 key"; None if it is strong:
    RSA of at least 2048 bits, EC on P-256, P-384 or P-521, Ed25519 or Ed448. Anything else (RSA
    below 2048 bits, EC on a smaller or non-NIST curve, DSA) is refused wherever a key is accepted."""
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        return None if key.key_size >= MIN_RSA_BITS else f"an RSA-{key.key_size} key"
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return None if key.curve.name in STRONG_CURVES else f"an EC key on curve {key.curve.name}"
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return None
    if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        return None
    return f"a {type(key).__name__.removesuffix('PublicKey').removesuffix('PrivateKey')} key"


KEY_RULE = "RSA of at least 2048 bits, or EC on P-256, P-384 or P-521"


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def check_client_cas(cas: list[x509.Certificate], *, path: Path) -> None:
    """Refuse a client-CA file that holds a certificate no CA: a device's own leaf there would trust
    whoever holds that one key, not a CA's devices."""
    for cert in cas:
        if not _is_ca(cert):
            raise ConfigError(
                f"{path} holds a certificate that is not a CA's ({cert.subject.rfc4514_string()}): "
                "it must hold the device CA's certificate"
            )


_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")  # used with fullmatch: "$" takes a final "\n"


def host_name(value: str, what: str) -> str:
    """`value` as a name a certificate can carry and a TLS peer can be checked against: an IP
    address (no network range) or a DNS name, internationalised names in their ASCII (IDNA) form.
    `ConfigError` naming `what` otherwise: a wildcard, a blank, a NUL, a space or other
    characters no host name has would be written into a certificate, or checked as some other name."""
    if "%" in value:  # an IPv6 zone ("fe80::1%eth0") is no part of a name a certificate carries
        raise ConfigError(f"{what} must be a DNS name or an IP address without a zone; got {value!r}")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    try:
        ascii_name = value.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_name = ""
    labels = ascii_name.removesuffix(".").split(".")
    if not ascii_name or len(ascii_name) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise ConfigError(f"{what} must be a DNS name or an IP address; got {value!r}")
    return ascii_name.removesuffix(".").lower()
