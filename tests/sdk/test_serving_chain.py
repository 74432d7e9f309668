"""The device applies X.509 path rules to the verifier's chain (issue #48, finding 4).

A pinned serving CA with path length 0 that mis-issues a CA:TRUE intermediate, which issues a
verifier certificate: gRPC's TLS stack accepts that chain, so the device checks it again under
its pinned anchors (`sdk.serving_chain`) and refuses it before any uplink.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from specsteer.core.session_types import SessionParams
from specsteer.sdk.remote import VerifierRefused
from specsteer.sdk.serving_chain import serving_chain_problem
from specsteer.server import pki as pki_mod
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, make_pki, remote, serve


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pki_mod.Pki:
    return make_pki(tmp_path_factory.mktemp("pathrules"), devices=("alice",))


@pytest.fixture
def cloud(char_tok) -> CloudVerifier:  # type: ignore[no-untyped-def]
    return CloudVerifier(tiny_lm(char_tok, seed=2, name="g"), tiny_lm(char_tok, seed=1, name="s"), seed=0, max_top_k=64)


def mis_issued_intermediate(ca: pki_mod.Issued) -> pki_mod.Issued:
    """What a pathlen-0 CA must never sign: another CA (CA:TRUE, may sign certificates)."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Rogue Intermediate")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(pki_mod._usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return pki_mod.Issued(cert, key)


def rogue_server(pki: pki_mod.Pki) -> pki_mod.Issued:
    """A verifier certificate for 127.0.0.1/localhost under the mis-issued intermediate, with it as chain."""
    rogue = mis_issued_intermediate(pki_mod.load_issued(pki.directory, "ca"))
    leaf = pki_mod.issue_leaf(rogue, "specsteer-verifier", hosts=["127.0.0.1", "localhost"])
    return pki_mod.Issued(leaf.cert, leaf.key, (rogue.cert,))


def _anchors(pki: pki_mod.Pki) -> list[x509.Certificate]:
    return [pki_mod.load_issued(pki.directory, stem).cert for stem in ("ca", "backup-ca")]


def test_a_chain_through_an_intermediate_the_pathlen_0_anchor_mis_issued_is_refused_before_any_uplink(
    pki: pki_mod.Pki, cloud: CloudVerifier, tmp_path: Path
) -> None:
    cert, key = pki_mod.write_issued(tmp_path, "rogue-server", rogue_server(pki))
    tap = RecordingTap()
    with (
        serve(cloud, pki, cert=cert, key=key) as (_, port),
        remote(port, pki, vocab_size=99, tap=tap) as verifier,
        pytest.raises(VerifierRefused, match=r"path rules: .*path length.*nothing was sent"),
    ):
        verifier.open([10, 11], SessionParams())
    # Nothing reached the tap: no uplink was built, let alone sent.
    assert tap.uplinks == [] and tap.sessions == 0


def test_the_honest_chain_still_connects(pki: pki_mod.Pki, cloud: CloudVerifier) -> None:
    tap = RecordingTap()
    with serve(cloud, pki) as (_, port), remote(port, pki, vocab_size=99, tap=tap) as verifier:
        verifier.open([10, 11], SessionParams()).close()
        verifier.open([10, 12], SessionParams()).close()  # the same connection: not checked again
    assert len(tap.uplinks) == 4  # Open and Close, twice


def test_path_rules_are_cryptographys_path_validation(pki: pki_mod.Pki) -> None:
    anchors = _anchors(pki)
    rogue = rogue_server(pki)
    assert "path length" in (serving_chain_problem([rogue.cert, *rogue.chain], anchors, "127.0.0.1") or "")
    honest = pki_mod.load_issued(pki.directory, "server")
    assert serving_chain_problem([honest.cert], anchors, "127.0.0.1") is None
    assert serving_chain_problem([honest.cert], anchors, "localhost") is None
    assert serving_chain_problem([honest.cert], anchors, "evil.example") is not None
    # A device (clientAuth) certificate under a pinned anchor is no verifier.
    ca = pki_mod.load_issued(pki.directory, "ca")
    client = pki_mod.issue_leaf(ca, "alice", hosts=["127.0.0.1"], client=True)
    assert serving_chain_problem([client.cert], anchors, "127.0.0.1") is not None
    # Expired, or under no pinned anchor.
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    expired = pki_mod.issue_leaf(ca, "v", hosts=["127.0.0.1"], not_before=long_ago, days=10)
    assert serving_chain_problem([expired.cert], anchors, "127.0.0.1") is not None
    other = pki_mod.issue_leaf(pki_mod.new_ca("Other"), "v", hosts=["127.0.0.1"])
    assert serving_chain_problem([other.cert], anchors, "127.0.0.1") is not None
    assert serving_chain_problem([], anchors, "127.0.0.1") == "it presented no certificate"
