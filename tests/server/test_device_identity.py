"""A device is who its certificate path says, checked as X.509 by `cryptography`: certificate
attacks against a live verifier over mutual TLS, then the policy's edges one by one."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specsteer.core import wire
from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.core.tls_identity import check_tls_identity
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.remote import TlsIdentity
from specsteer.server import pki as pki_mod
from specsteer.server.device_identity import DeviceCertificates, NotADevice
from specsteer.server.errors import PkiError
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, remote, serve

C = grpc.StatusCode
OPEN = wire.encode_open([40, 41, 42, 43], SessionParams(top_k=5, draft_len=4))
NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("identity"), devices=("alice",))


@pytest.fixture(scope="module")
def device_ca(pki) -> pki_mod.Issued:
    return pki_mod.load_issued(pki.directory, "device-ca")


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g")


@pytest.fixture(scope="module")
def live(models, pki, tmp_path_factory):
    transcripts = tmp_path_factory.mktemp("transcripts")
    with serve(CloudVerifier(models[1], models[0], seed=0, max_top_k=64), pki, transcript_dir=transcripts) as s:
        yield s[0], s[1], transcripts / "server-transcript.jsonl"


def _usage(*, sign: bool, issue: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=issue,
        crl_sign=issue,
        encipher_only=False,
        decipher_only=False,
    )


def rogue_ca_leaf(device_ca: pki_mod.Issued, name: str = "mallory") -> pki_mod.Issued:
    """What a careless (or compromised) issuance looks like: a "device" certificate with CA:TRUE,
    complete with every extension an issuing CA carries, so only the path length stops it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "SpecSteer"), x509.NameAttribute(NameOID.COMMON_NAME, name)]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(device_ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(sign=True, issue=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(device_ca.key.public_key()), critical=False)
        .sign(device_ca.key, hashes.SHA256())
    )
    return pki_mod.Issued(cert, key)


def child_of(rogue: pki_mod.Issued, name: str = "bob") -> pki_mod.Issued:
    """A leaf for another device's name, issued by the rogue CA:TRUE leaf, presented with it."""
    leaf = pki_mod.issue_leaf(rogue, name, client=True)
    return pki_mod.Issued(leaf.cert, leaf.key, (rogue.cert,))


def open_as(port: int, ident: TlsIdentity) -> tuple[list[bytes], C, str]:
    channel = grpc.secure_channel(f"127.0.0.1:{port}", ident.credentials())
    try:
        call = channel.stream_stream(wire.SESSION_METHOD)(iter([OPEN]), timeout=20)
        try:
            out = list(call)
        except grpc.RpcError as exc:
            return [], exc.code(), exc.details() or ""
        return out, call.code(), call.details() or ""
    finally:
        channel.close()


def identity_of(pki, issued: pki_mod.Issued) -> TlsIdentity:
    # Built directly: an attacker's client skips the checks the SDK makes of its own certificate.
    return TlsIdentity(identity(pki).pins, issued.chain_pem, issued.key_pem)


# -- the attacks, against a live verifier --------------------------------------------------------


def test_a_ca_true_leaf_from_the_device_ca_is_refused(live, pki, device_ca) -> None:
    server, port, transcript = live
    refused_before = server.metrics.value("specsteer_rejected_messages_total", {"code": "UNAUTHENTICATED"})
    out, code, details = open_as(port, identity_of(pki, rogue_ca_leaf(device_ca)))
    assert (out, code) == ([], C.UNAUTHENTICATED)
    assert "not a valid device certificate" in details and "basicConstraints.cA" in details
    # Recorded as the other refusals are, and never served: no stream of its name in the transcript.
    assert server.metrics.value("specsteer_rejected_messages_total", {"code": "UNAUTHENTICATED"}) == refused_before + 1
    assert '"mallory"' not in transcript.read_text()


def test_a_certificate_issued_by_a_ca_true_leaf_is_refused(live, pki, device_ca) -> None:
    # The attack: mallory's CA:TRUE leaf issues "bob", and bob presents mallory as intermediate.
    # gRPC's TLS stack accepts this path; the device CA's path length 0 forbids it.
    server, port, transcript = live
    out, code, details = open_as(port, identity_of(pki, child_of(rogue_ca_leaf(device_ca))))
    assert (out, code) == ([], C.UNAUTHENTICATED)
    assert "path length constraint" in details
    assert '"bob"' not in transcript.read_text()
    assert server.service.open_sessions == 0


def test_an_expired_device_certificate_is_refused(live, pki, device_ca) -> None:
    _, port, transcript = live
    old = NOW - dt.timedelta(days=30)
    expired = pki_mod.issue_leaf(device_ca, "carol", client=True, not_before=old, days=1)
    out, code, details = open_as(port, identity_of(pki, expired))
    # Refused in the handshake (gRPC's own check) or at the stream (ours): never served.
    assert out == [] and code in (C.UNAVAILABLE, C.UNAUTHENTICATED), (code, details)
    assert code is C.UNAVAILABLE or "not valid at validation time" in details
    assert '"carol"' not in transcript.read_text()


def test_a_device_certificate_without_client_auth_is_refused(live, pki, device_ca) -> None:
    _, port, transcript = live
    server_only = pki_mod.issue_leaf(device_ca, "dave")  # EKU serverAuth only
    out, code, details = open_as(port, identity_of(pki, server_only))
    assert out == [] and code in (C.UNAVAILABLE, C.UNAUTHENTICATED), (code, details)
    assert code is C.UNAVAILABLE or "EKU" in details
    assert '"dave"' not in transcript.read_text()


def test_the_normal_device_is_still_served(live, pki, models) -> None:
    _, port, transcript = live
    specialist = Specialist(models[0], None)
    with remote(port, pki, vocab_size=models[0].vocab_size) as verifier:
        result = generate(
            specialist, "Hello there", SessionParams(draft_len=3), DecodeOptions(max_new_tokens=6), verifier
        )
    assert result.stats.fallback is None and result.stats.rounds > 0
    assert '"alice"' in transcript.read_text()


# -- the policy, certificate by certificate ------------------------------------------------------


@pytest.fixture(scope="module")
def check(device_ca) -> DeviceCertificates:
    return DeviceCertificates(lambda: (device_ca.cert,))


def test_the_projects_own_device_certificates_pass(check, pki) -> None:
    alice = x509.load_pem_x509_certificate(pki.device_cert("alice").read_bytes())
    check.verify(alice)


def test_a_device_certificate_from_before_key_usage_was_written_still_passes(check, device_ca) -> None:
    # `server pki issue-device` wrote no key usage before; those certificates stay valid.
    key = ec.generate_private_key(ec.SECP256R1())
    legacy = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old-phone")]))
        .issuer_name(device_ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(device_ca.key.public_key()), critical=False)
        .sign(device_ca.key, hashes.SHA256())
    )
    check.verify(legacy)


def _leaf_with_usage(device_ca: pki_mod.Issued, usage: x509.KeyUsage) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "erin")]))
        .issuer_name(device_ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(device_ca.key.public_key()), critical=False)
        .sign(device_ca.key, hashes.SHA256())
    )


@pytest.mark.parametrize(
    ("usage", "reason"),
    [
        (_usage(sign=True, issue=True), "must not allow signing certificates"),
        (_usage(sign=False, issue=False), "must allow digital signatures"),
    ],
    ids=["may-issue", "may-not-sign"],
)
def test_a_leaf_key_usage_other_than_signing_is_refused(check, device_ca, usage, reason) -> None:
    with pytest.raises(NotADevice, match=reason):
        check.verify(_leaf_with_usage(device_ca, usage))


@pytest.mark.parametrize(
    ("when", "valid"),
    [(dt.timedelta(days=-2), False), (dt.timedelta(0), True), (dt.timedelta(days=40), False)],
    ids=["before", "during", "after"],
)
def test_validity_is_checked_at_the_time_of_the_stream(check, device_ca, when, valid) -> None:
    # Now, not at import: the device CA (valid from 5 minutes before the PKI fixture was made)
    # may be younger than this module in a long run.
    now = dt.datetime.now(dt.UTC)
    leaf = pki_mod.issue_leaf(device_ca, "frank", client=True, not_before=now - dt.timedelta(days=1), days=30).cert
    when = now + when
    if valid:
        check.verify(leaf, now=when)
    else:
        with pytest.raises(NotADevice, match="not valid at validation time"):
            check.verify(leaf, now=when)


def test_a_presented_root_is_never_an_anchor(check) -> None:
    # A stranger presents its own CA along with its leaf: an intermediate candidate, not a root.
    stranger_ca = pki_mod.new_ca("SpecSteer Device CA")
    leaf = pki_mod.issue_leaf(stranger_ca, "alice", client=True).cert
    with pytest.raises(NotADevice):
        check.verify(leaf, [stranger_ca.cert])


def test_the_anchors_follow_a_reloaded_client_ca(device_ca) -> None:
    anchors = [device_ca.cert]
    check = DeviceCertificates(lambda: tuple(anchors))
    other_ca = pki_mod.new_ca("SpecSteer Device CA 2")
    leaf = pki_mod.issue_leaf(other_ca, "grace", client=True).cert
    with pytest.raises(NotADevice):
        check.verify(leaf)
    anchors.append(other_ca.cert)  # the client CA file now holds both CAs
    check.verify(leaf)
    anchors.clear()
    with pytest.raises(NotADevice, match="trusts no device CA"):
        check.verify(leaf)


def _ca(name: str, issuer: pki_mod.Issued | None, *, constraints: x509.NameConstraints | None) -> pki_mod.Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signing_key = issuer.key if issuer else key  # a root signs itself
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None if issuer is None else 0), critical=True)
        .add_extension(_usage(sign=False, issue=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()), critical=False)
    )
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=True)
    return pki_mod.Issued(builder.sign(signing_key, hashes.SHA256()), key)


@pytest.mark.parametrize("constrained", [False, True])
def test_a_device_issued_under_a_name_constrained_ca_is_refused(constrained) -> None:
    # A tenant's sub-CA constrained to its own DNS names: the constraint binds subjectAltNames, but
    # the device's name is its CN, so it could name any device. Such paths are refused.
    root = _ca("Device Root", None, constraints=None)
    constraints = x509.NameConstraints([x509.DNSName("tenant-a.devices")], None) if constrained else None
    tenant = _ca("Tenant A Device CA", root, constraints=constraints)
    leaf = pki_mod.issue_leaf(tenant, "bob-of-tenant-b", client=True, hosts=["phone.tenant-a.devices"])
    check = DeviceCertificates(lambda: (root.cert,))
    if not constrained:
        check.verify(leaf.cert, [tenant.cert])  # the same path without the constraint is a device
        return
    with pytest.raises(NotADevice, match="CA with name constraints"):
        check.verify(leaf.cert, [tenant.cert])


# -- key strength (issue #48, finding 8) -------------------------------------------------------------


def _leaf_with_key(device_ca: pki_mod.Issued, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> pki_mod.Issued:
    """A device certificate the device CA issued, complete in every way but its key's strength."""
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "weakling")]))
        .issuer_name(device_ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign=True, issue=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(device_ca.key.public_key()), critical=False)
        .sign(device_ca.key, hashes.SHA256())
    )
    return pki_mod.Issued(cert, key)  # type: ignore[arg-type]  # Issued is typed for the project's EC keys


_WEAK = [
    pytest.param(lambda: rsa.generate_private_key(65537, 1024), "an RSA-1024 key", id="rsa-1024"),
    pytest.param(lambda: rsa.generate_private_key(65537, 1536), "an RSA-1536 key", id="rsa-1536"),
    pytest.param(lambda: ec.generate_private_key(ec.SECP224R1()), "an EC key on curve secp224r1", id="p-224"),
    pytest.param(lambda: ec.generate_private_key(ec.SECP256K1()), "an EC key on curve secp256k1", id="secp256k1"),
]


@pytest.mark.parametrize(("make", "weak"), _WEAK)
def test_a_device_certificate_with_a_weak_key_is_refused(check, device_ca, make, weak) -> None:
    with pytest.raises(NotADevice) as err:
        check.verify(_leaf_with_key(device_ca, make()).cert)
    assert str(err.value) == (
        f"the client certificate has {weak}, too weak: a device certificate's key must be "
        "RSA of at least 2048 bits, or EC on P-256, P-384 or P-521"
    )


@pytest.mark.parametrize(
    "make",
    [lambda: rsa.generate_private_key(65537, 2048), lambda: ec.generate_private_key(ec.SECP384R1())],
    ids=["rsa-2048", "p-384"],
)
def test_a_device_certificate_with_a_strong_key_passes(check, device_ca, make) -> None:
    check.verify(_leaf_with_key(device_ca, make()).cert)


def test_an_rsa_1024_device_is_not_served(live, pki, device_ca) -> None:
    _, port, transcript = live
    weak = _leaf_with_key(device_ca, rsa.generate_private_key(65537, 1024))
    out, code, details = open_as(port, identity_of(pki, weak))
    assert (out, code) == ([], C.UNAUTHENTICATED)
    assert "has an RSA-1024 key, too weak" in details
    assert '"weakling"' not in transcript.read_text()


def test_the_device_refuses_its_own_weak_key_before_connecting(tmp_path, device_ca) -> None:
    issued = _leaf_with_key(device_ca, rsa.generate_private_key(65537, 1024))
    with pytest.raises(ConfigError, match=r"has an RSA-1024 key, too weak: a TLS key must be RSA of at least 2048"):
        check_tls_identity(
            issued.chain_pem, issued.key_pem, cert_path=tmp_path / "d.pem", key_path=tmp_path / "d.key", role="client"
        )


def test_server_pki_refuses_to_issue_under_a_weak_device_ca(tmp_path) -> None:
    directory = make_pki(tmp_path / "pki", devices=()).directory
    key = ec.generate_private_key(ec.SECP224R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "SpecSteer Device CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    pki_mod.write_issued(directory, "device-ca", pki_mod.Issued(cert, key))
    with pytest.raises(PkiError, match="holds an EC key on curve secp224r1, too weak to issue with"):
        pki_mod.issue_device(directory, "dora")
    assert not (directory / "devices" / "dora.pem").exists()
