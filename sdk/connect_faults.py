"""Why a connection to the verifier failed: a failed check (refuse) or a dead verifier (fall back).

The two must never be confused. A check that failed (the peer's certificate does not chain to a
pinned anchor, names another host, has expired; the peer does not speak TLS; the verifier refused
this device's certificate) is a security event: the device raises `VerifierRefused` and never
papers over it by finishing locally. A verifier that is down, restarting, killed mid-handshake,
or behind a balancer with no healthy backend is a transport fault: the device may finish the text
on its own (`VerifierLost`).

gRPC reports both as UNAVAILABLE with free-text details, so the cause is read from those details,
identity failures first, then the network's own failures (refused, reset, timed out, no route, no
name). A cause that is neither is refused too: only a failure known to be the network's may end
in a fallback, so a new or local failure (a device key gRPC cannot use) is never read as an
outage.

One shape is ambiguous: with TLS 1.3 a verifier that rejects the device's certificate does so
after the device's side of the handshake is done, and gRPC only says "Socket closed", as it would
for a verifier that accepted the device and then went away. For that shape the device asks the
peer directly (`certificate_refusal`): one more TLS 1.3 handshake with the same pinned anchors and
certificate, no application byte sent, then a read. A gRPC verifier that accepted the device
speaks first (its HTTP/2 settings); one that refused it sends an alert or closes without a byte.
The probe never offers TLS 1.2, where the device's certificate (its name) would cross in the
clear: an on-path attacker who cuts the first connection must not learn who is connecting.
"""

from __future__ import annotations

import re
import ssl
import time
from typing import Unpack

from specsteer.sdk.tls_probe import ProbePeer, tls_handshake

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
# Markers of the transport failing under the handshake or the stream: nothing was checked and
# nothing failed one. Only these (and the ambiguous "Socket closed") may end in a fallback.
_TRANSPORT_FAULTS = (
    "Handshake read failed",
    "Handshake write failed",
    "Connection reset",
    "Connection refused",
    "Connection aborted",
    "Connection timed out",
    "Broken pipe",
    "Failed to connect to remote host",
    "End of TCP stream",
    "DNS resolution failed",
    "Domain name not found",
    "Name or service not known",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Host is unreachable",
    "No route to host",
    "no healthy upstream",
    "Deadline Exceeded",
    "Timeout occurred",
    "keepalive watchdog timeout",
    "GOAWAY received",
    "Stream removed",
    "RST_STREAM",
)
# A TLS protocol error that is none of the above; checked after them, like any unknown cause.
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

    def __init__(self, refused: bool, meaning: str, *, ambiguous: bool = False, unknown: bool = False) -> None:
        self.refused = refused
        self.meaning = meaning
        self.ambiguous = ambiguous  # "Socket closed" after the handshake: ask the peer
        self.unknown = unknown  # refused only because the cause is not known to be the network's

    def __repr__(self) -> str:
        return (
            f"ConnectFault(refused={self.refused}, meaning={self.meaning!r}, ambiguous={self.ambiguous}, "
            f"unknown={self.unknown})"
        )


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
    # Fail closed: a cause not known to be the network's is no reason to finish locally.
    return ConnectFault(True, "the connection failed for a reason that is not a network fault", unknown=True)


_CLOSED_AFTER_HANDSHAKE = "it does not accept this device's certificate (it closed the connection after the handshake)"


def certificate_refusal(host: str, port: int, *, timeout: float, **peer: Unpack[ProbePeer]) -> str | None:
    """If the verifier at host:port refuses this device's certificate, the refusal; else None.

    One TLS 1.3 handshake against the pinned anchors (a peer that fails them is not asked
    anything: None), then a read of what the peer says first. No application byte is ever written;
    `timeout` bounds the whole probe. The device's side of a TLS 1.3 handshake is done first, so a
    refusal is an alert or a close without a byte (which cannot be told from a verifier that went
    away at that instant: fail closed, as a refusal). A peer that speaks only TLS 1.2 is not asked:
    there the device's certificate would cross unencrypted.
    """
    try:
        with tls_handshake(host, port, deadline=time.monotonic() + timeout, **peer) as tls:
            first = tls.recv(1)
    except ssl.SSLError as exc:
        # An alert the table names is a refusal; any other failure (a certificate this probe
        # cannot load, a chain that fails the anchors) shows no refusal.
        return _CERTIFICATE_ALERTS.get(str(exc.reason or ""))
    except OSError:
        return None
    # A gRPC verifier that accepts the device speaks first (its HTTP/2 settings); one that closes
    # without a byte refused it.
    return None if first else _CLOSED_AFTER_HANDSHAKE
