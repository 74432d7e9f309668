"""Why a connection to the verifier failed: a failed check (refuse) or a dead verifier (fall back).

The two must never be confused. A check that failed (the peer's certificate does not chain to a
pinned anchor, names another host, has expired; the peer does not speak TLS; the verifier refused
this device's certificate) is a security event: the device raises `VerifierRefused` and never
papers over it by finishing locally. A verifier that is down, restarting, killed mid-handshake,
or behind a balancer with no healthy backend is a transport fault: the device may finish the text
on its own (`VerifierLost`).

gRPC reports both as UNAVAILABLE with free-text details, so the cause is read from those details,
identity failures first. One shape is ambiguous: with TLS 1.3 a verifier that rejects the
device's certificate does so after the device's side of the handshake is done, and gRPC only says
"Socket closed", as it would for a verifier that died right then. For that shape the device asks
the peer directly (`certificate_refusal`): one more TLS handshake with the same pinned anchors and
certificate, no application byte sent, reading the TLS alert the verifier answers with.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ConnectFault", "certificate_refusal", "classify", "specific_cause"]

_ADDRESS_PREFIX = re.compile(r"^[A-Z_]+: (?:ipv[46]|unix|unix-abstract):\S+: ")

# Markers of a failed identity check, and what each means for a user; checked first.
_IDENTITY_FAILURES: tuple[tuple[str, str], ...] = (
    ("Hostname Verification", "its certificate is not valid for the host name {host!r}"),
    ("certificate has expired", "its certificate has expired"),
    ("certificate is not yet valid", "its certificate is not yet valid"),
    ("WRONG_VERSION_NUMBER", "it does not speak TLS"),
    ("CERTIFICATE_VERIFY_FAILED", "its certificate does not chain to a pinned anchor"),
)
# Markers of the transport failing under the handshake: nothing was checked and nothing failed one.
_TRANSPORT_FAULTS = (
    "Handshake read failed",
    "Handshake write failed",
    "Connection reset",
    "Connection refused",
    "Broken pipe",
    "Failed to connect",
    "End of TCP stream",
    "DNS resolution failed",
    "Connection timed out",
    "Network is unreachable",
    "No route to host",
    "no healthy upstream",
)
# A TLS protocol error that is none of the above: fail closed, as a refusal.
_TLS_PROTOCOL_ERRORS = ("SSL_ERROR_SSL", "TSI_")
# The TLS alerts by which a verifier refuses the device's certificate.
_CERTIFICATE_ALERTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "it requires a device certificate this device did not present",
    "TLSV1_ALERT_UNKNOWN_CA": "it does not accept this device's certificate (unknown issuer)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "it does not accept this device's certificate (bad certificate)",
    "SSLV3_ALERT_CERTIFICATE_REVOKED": "it has revoked this device's certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "this device's certificate has expired",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": "it does not accept this device's certificate (unsupported)",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "it does not accept this device's certificate",
    "TLSV1_ALERT_ACCESS_DENIED": "it denied this device access",
}


class ConnectFault:
    """What a failed connection means: `refused` (a check failed; `meaning` says which) or not."""

    def __init__(self, refused: bool, meaning: str, *, ambiguous: bool = False) -> None:
        self.refused = refused
        self.meaning = meaning
        self.ambiguous = ambiguous  # "Socket closed" after the handshake: ask the peer

    def __repr__(self) -> str:
        return f"ConnectFault(refused={self.refused}, meaning={self.meaning!r}, ambiguous={self.ambiguous})"


def specific_cause(detail: str) -> str:
    """The specific cause at the end of gRPC's details ("failed to connect to all addresses;
    last error: UNAVAILABLE: ipv4:...: Socket closed" -> "Socket closed")."""
    text = detail.removesuffix(": OK")
    text = text.split("last error: ", 1)[-1]
    return _ADDRESS_PREFIX.sub("", text).strip()


def classify(detail: str, host: str) -> ConnectFault:
    """The cause behind gRPC's details for a connection or stream that failed as UNAVAILABLE."""
    lowered = specific_cause(detail).lower()
    for marker, meaning in _IDENTITY_FAILURES:
        if marker.lower() in lowered:
            return ConnectFault(True, meaning.format(host=host))
    if any(marker.lower() in lowered for marker in _TRANSPORT_FAULTS):
        return ConnectFault(False, "the connection failed")
    if any(marker.lower() in lowered for marker in _TLS_PROTOCOL_ERRORS):
        return ConnectFault(True, "the TLS handshake failed")
    if "socket closed" in lowered:
        return ConnectFault(False, "the verifier closed the connection", ambiguous=True)
    return ConnectFault(False, "the connection failed")


def certificate_refusal(
    host: str,
    port: int,
    *,
    anchors_pem: bytes,
    cert_chain_pem: bytes,
    key_pem: bytes,
    server_name: str | None,
    timeout: float,
) -> str | None:
    """If the verifier at host:port refuses this device's certificate, the refusal; else None.

    One TLS handshake against the pinned anchors (a peer that fails them is not asked anything:
    None), then a read of what the peer says first: a verifier that accepts the device opens with
    its HTTP/2 settings; one that refuses it sends a certificate alert or (gRPC's own servers)
    closes the connection without a byte. No application byte is ever written.
    """
    context = ssl.create_default_context(cadata=anchors_pem.decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    if cert_chain_pem and key_pem:
        try:
            with _key_files(cert_chain_pem, key_pem) as (cert_path, key_path):
                context.load_cert_chain(str(cert_path), str(key_path))
        except (ssl.SSLError, OSError):
            return None  # this probe cannot present the identity gRPC did: it proves nothing
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=server_name or host) as tls,
        ):
            tls.settimeout(timeout)
            first = tls.recv(1)
    except ssl.SSLError as exc:
        return _CERTIFICATE_ALERTS.get(str(exc.reason or ""))
    except OSError:
        return None
    # A gRPC verifier that accepts the device speaks first (its HTTP/2 settings). One that proved
    # itself against the pinned anchors and then closes without a byte has refused the device.
    return (
        "it does not accept this device's certificate (it closed the connection after the handshake)"
        if not first
        else None
    )


@contextlib.contextmanager
def _key_files(cert_chain_pem: bytes, key_pem: bytes) -> Iterator[tuple[Path, Path]]:
    # Python's ssl loads a key only from a file: a private folder (0700, files 0600), in memory
    # where the system has one, removed as soon as the context holds the key.
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="specsteer-probe-", dir=base) as folder:
        cert_path, key_path = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        for path, data in ((cert_path, cert_chain_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        yield cert_path, key_path
