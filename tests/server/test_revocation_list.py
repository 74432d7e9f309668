"""Per-certificate revocation (issue 48, Build 7): a list of revoked certificates, by SHA-256
fingerprint or serial, re-read when it changes, refusing the next stream without a restart; a
real verifier over mutual TLS on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from specsteer.core import wire
from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.server.revocation import RevocationList
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, serve

C = grpc.StatusCode
OPEN = wire.encode_open([5, 6, 7], SessionParams(top_k=5, draft_len=4))


def _stream(port: int, pki, device: str) -> tuple[C, str]:
    """One Session stream (Open, half-close): its status, and details."""
    with grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, device).credentials()) as ch:
        call = ch.stream_stream(wire.SESSION_METHOD)(iter([OPEN]), timeout=30)
        try:
            list(call)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
        return call.code(), call.details() or ""


def _rewrite(path: Path, text: str) -> None:
    path.write_text(text)
    # Same size and the same second on a coarse clock would hide the change: move the time on.
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


@pytest.mark.slow  # seven real mutual-TLS streams, ~16 s on a shared CPU
def test_a_certificate_revoked_while_the_verifier_runs_is_refused_at_its_next_stream(tmp_path: Path, char_tok) -> None:
    pki = make_pki(tmp_path, devices=("alice", "bob"))
    alice = x509.load_pem_x509_certificate(pki.device_cert("alice").read_bytes())
    bob = x509.load_pem_x509_certificate(pki.device_cert("bob").read_bytes())
    listed = tmp_path / "revoked.txt"
    listed.write_text("# revoked device certificates\n")
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2), tiny_lm(char_tok, seed=1), seed=0)
    with serve(cloud, pki, revoked_certificates=listed) as (_, port):
        assert _stream(port, pki, "alice")[0] is C.OK
        _rewrite(listed, f"{alice.fingerprint(hashes.SHA256()).hex()}  # alice's lost phone\n")
        code, details = _stream(port, pki, "alice")
        assert code is C.PERMISSION_DENIED and "is revoked (device 'alice')" in details, details
        assert _stream(port, pki, "bob")[0] is C.OK  # one certificate, not every device
        _rewrite(listed, f"serial:{bob.serial_number:x}\n")  # by serial; alice's entry is gone
        assert _stream(port, pki, "alice")[0] is C.OK
        code, details = _stream(port, pki, "bob")
        assert code is C.PERMISSION_DENIED and f"serial {bob.serial_number:x} is revoked" in details
        # A list that became unusable refuses every new stream (fail closed), in one sentence.
        _rewrite(listed, "not a certificate\n")
        code, details = _stream(port, pki, "alice")
        assert code is C.UNAVAILABLE and "neither a certificate's SHA-256 fingerprint" in details, details
        listed.unlink()
        assert _stream(port, pki, "bob")[0] is C.UNAVAILABLE


@pytest.mark.parametrize("text", ["alice\n", "serial:xyz\n", "sha256/abc\n"])
def test_a_bad_revocation_list_is_refused_at_start(tmp_path: Path, text: str) -> None:
    listed = tmp_path / "revoked.txt"
    listed.write_text(text)
    with pytest.raises(ConfigError, match="so it would revoke nothing"):
        RevocationList(listed)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ConfigError, match="is not a regular file"):
        RevocationList(tmp_path / "fifo")
