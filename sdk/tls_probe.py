"""One probe TLS connection to the verifier, beside gRPC's: what the device learns before it sends.

gRPC (Python) shows a client neither the peer's certificates nor the alert a refusing peer sent,
so two checks open one more TLS connection of their own to the same address, with the same pinned
anchors and the device's certificate: `sdk.serving_chain` reads the chain the verifier presents,
and `sdk.connect_faults` reads whether the verifier refused the device's certificate. Both go
through `tls_handshake`, so both offer exactly what the device's gRPC channel offers:

* TLS 1.3 only: a TLS 1.2 handshake would send the device's certificate unencrypted;
* the ALPN ``h2`` of a gRPC channel, and the host dialled (or `server_name`) as SNI;
* the device's certificate and key, loaded from a private folder that is removed at once.

No application byte is ever written on a probe connection.

    with tls_handshake(host, port, deadline=time.monotonic() + 5, anchors_pem=..., cert_chain_pem=...,
                       key_pem=..., server_name=None) as tls:
        ...   # the handshake is done: read what the check needs, then the connection closes
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict, Unpack

__all__ = ["ProbePeer", "key_files", "tls_handshake"]


class ProbePeer(TypedDict):
    """Whom a probe trusts and whom it presents: what each check passes on to `tls_handshake`."""

    anchors_pem: bytes  # the pinned anchors, the only roots the probe accepts
    cert_chain_pem: bytes  # the device's certificate chain ("" with `key_pem`: none presented)
    key_pem: bytes
    server_name: str | None  # the name the verifier's certificate must carry (default: the host)


@contextlib.contextmanager
def tls_handshake(host: str, port: int, *, deadline: float, **peer: Unpack[ProbePeer]) -> Iterator[ssl.SSLSocket]:
    """A TLS 1.3 connection to host:port whose handshake is done, closed when the block ends.

    Raises `ssl.SSLError` (a certificate the device cannot load, a handshake that failed: its
    `reason` names the peer's alert) or `OSError` (no connection, `deadline` passed, a reset).
    Without `cert_chain_pem` and `key_pem` the device presents no certificate.
    """
    context = ssl.create_default_context(cadata=peer["anchors_pem"].decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(["h2"])
    if peer["cert_chain_pem"] and peer["key_pem"]:
        with key_files(peer["cert_chain_pem"], peer["key_pem"]) as (cert_path, key_path):
            context.load_cert_chain(str(cert_path), str(key_path))
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the probe's time ran out before it connected")
    raw = socket.create_connection((host, port), timeout=left)
    with (
        raw,
        context.wrap_socket(raw, server_hostname=peer["server_name"] or host, do_handshake_on_connect=False) as tls,
    ):
        tls.settimeout(max(deadline - time.monotonic(), 0.001))
        tls.do_handshake()
        tls.settimeout(max(deadline - time.monotonic(), 0.001))
        yield tls


@contextlib.contextmanager
def key_files(cert_chain_pem: bytes, key_pem: bytes) -> Iterator[tuple[Path, Path]]:
    """The device's certificate chain and key as two files, for as long as the block runs."""
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
