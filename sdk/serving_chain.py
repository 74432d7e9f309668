"""The verifier's certificate chain checked as an X.509 path under the pinned anchors.

gRPC's TLS stack checks that the verifier's certificate chains to a pinned anchor and names the
host, but it does not apply the anchor's own constraints: a pinned serving CA with path length 0
that (mis-)issues an intermediate with CA:TRUE lets that intermediate issue a verifier
certificate gRPC accepts, and the prompt's token IDs would reach whoever holds its key. So before
a session's first uplink on a fresh connection the device reads the chain the verifier presents
and checks it as a whole path with `cryptography.x509.verification` (RFC 5280 with the Web PKI's
profile, as `server.device_identity` checks device chains), never by hand:

    anchors            only the pinned anchor certificates (`sdk.pinning`)
    basic constraints  every issuer a CA within its (and its anchor's) path length; the leaf not a CA
    EKU                the leaf is for TLS server authentication
    validity           every certificate on the path is valid now
    name               the leaf names the host dialled (or `server_name`)

gRPC (Python) does not expose the peer's certificates to a client, so the chain is read by one
more TLS 1.3 handshake (`sdk.tls_probe`) to the same address with the same anchors and device certificate (Python's
own TLS stack checks it first; a chain it refuses is refused too): no application byte is
written, and the connection is closed once the chain is read. That handshake is a second
connection, not the one gRPC streams on: a peer that serves one chain to the check and another
to gRPC is caught only where both break the rules.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import ssl
import time
from _ssl import ENCODING_DER  # the encoding `_ssl.Certificate.public_bytes` takes for DER
from collections.abc import Sequence
from typing import Any, Unpack

from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from specsteer.sdk.tls_probe import ProbePeer, tls_handshake

__all__ = ["read_serving_chain", "serving_chain_problem"]

# cryptography's messages end by naming the certificate's Python repr: not for a user's eyes.
_ENCOUNTERED = re.compile(r"\s*\(encountered processing <Certificate.*$", re.DOTALL)


def _subject(name: str) -> x509.DNSName | x509.IPAddress:
    try:
        return x509.IPAddress(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return x509.DNSName(name)


def serving_chain_problem(
    chain: Sequence[x509.Certificate],
    anchors: Sequence[x509.Certificate],
    name: str,
    *,
    now: dt.datetime | None = None,
) -> str | None:
    """Why `chain` (the leaf first, then what the peer sent with it) is no valid path to one of
    `anchors` for `name`; None when it is one. The peer's other certificates serve as
    intermediates only, never as anchors."""
    if not chain:
        return "it presented no certificate"
    if not anchors:
        return "the device pins no anchor"
    verifier = (
        PolicyBuilder()
        .store(Store(list(anchors)))
        .time(now or dt.datetime.now(dt.UTC))
        .build_server_verifier(_subject(name))
    )
    leaf, presented = chain[0], chain[1:]
    try:
        verifier.verify(leaf, [cert for cert in presented if cert != leaf])
    except VerificationError as exc:
        return _ENCOUNTERED.sub("", str(exc)).removeprefix("validation failed: ")
    return None


def read_serving_chain(
    host: str, port: int, *, timeout: float, **peer: Unpack[ProbePeer]
) -> list[x509.Certificate] | str:
    """The certificates the verifier at host:port presents (leaf first), or why none were read.

    One TLS 1.3 handshake against the pinned anchors with the device's certificate (TLS 1.2 is
    never offered: the device's certificate would cross in the clear); nothing is written after
    it. A failure is returned as text: the caller refuses, it never falls back.
    """
    try:
        with tls_handshake(host, port, deadline=time.monotonic() + timeout, **peer) as tls:
            # The chain as presented: public (`SSLSocket.get_unverified_chain`) only from Python 3.13.
            sslobj: Any = getattr(tls, "_sslobj", None)
            presented = sslobj.get_unverified_chain() if sslobj is not None else None
    except ssl.SSLCertVerificationError as exc:
        return f"its certificate chain is not valid ({exc.verify_message})"
    except (ssl.SSLError, OSError) as exc:
        return f"its certificate chain could not be read ({exc})"
    if not presented:
        return "it presented no certificate"
    try:
        return [x509.load_der_x509_certificate(cert.public_bytes(ENCODING_DER)) for cert in presented]
    except ValueError as exc:
        return f"it presented a certificate that does not parse ({exc})"
