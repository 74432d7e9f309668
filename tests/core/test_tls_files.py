"""TLS material is read only from regular, bounded files nobody else can use against the holder,
and an identity that could never authenticate in its role is refused when it is loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography import x509

from specsteer.core.errors import ConfigError
from specsteer.sdk.pinning import PinningError
from specsteer.sdk.remote import TlsIdentity
from specsteer.server import pki as pki_mod
from specsteer.server.grpc_server import CertificateSource
from tests.verifier_harness import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("tlsfiles"), devices=("alice",))


def _copy(src: Path, dst: Path, mode: int) -> Path:
    dst.write_bytes(src.read_bytes())
    dst.chmod(mode)
    return dst


@pytest.mark.parametrize(
    ("mode", "refused"),
    [(0o600, False), (0o400, False), (0o640, False), (0o644, True), (0o604, True), (0o660, True), (0o666, True)],
)
def test_a_device_key_others_can_read_is_refused(pki, tmp_path, mode, refused) -> None:
    key = _copy(pki.device_key("alice"), tmp_path / "alice.key", mode)
    if refused:
        with pytest.raises(ConfigError, match=rf"can be read by other users \(mode {mode:04o}\): chmod 600 it"):
            TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), key)
    else:
        TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), key)


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664])
def test_a_pins_file_others_can_change_is_refused(pki, tmp_path, mode) -> None:
    pins = _copy(pki.pins, tmp_path / "pins.txt", mode)
    with pytest.raises(PinningError, match="can be changed by other users"):
        TlsIdentity.from_files(pins, pki.device_cert("alice"), pki.device_key("alice"))


def test_a_key_path_that_is_no_regular_file_is_refused_without_blocking(pki, tmp_path) -> None:
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo, 0o600)  # opening it for reading would block until a writer comes
    zero = tmp_path / "zero.key"
    zero.symlink_to("/dev/zero")  # reading it would never end
    for path in (fifo, zero, tmp_path):
        with pytest.raises(ConfigError, match="is not a regular file"):
            TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), path)


def test_a_tls_file_larger_than_any_certificate_is_refused(pki, tmp_path) -> None:
    big = tmp_path / "big.pem"
    big.write_bytes(pki.device_cert("alice").read_bytes() + b"\n" * (2 << 20))
    with pytest.raises(ConfigError, match="more than any TLS file"):
        TlsIdentity.from_files(pki.pins, big, pki.device_key("alice"))


def test_a_device_cannot_present_a_ca_or_a_server_certificate(pki, tmp_path) -> None:
    device_ca = pki_mod.load_issued(pki.directory, "device-ca")
    server = pki_mod.load_issued(pki.directory, "server")
    for stem, issued, message in (
        ("ca", device_ca, "is a CA's certificate, not one a device can present"),
        ("server", server, "does not allow clientAuth"),
    ):
        cert, key = pki_mod.write_issued(tmp_path, stem, issued)
        with pytest.raises(ConfigError, match=message):
            TlsIdentity.from_files(pki.pins, cert, key)


def test_the_verifier_refuses_a_device_certificate_to_serve_with_or_a_leaf_as_its_client_ca(pki, tmp_path) -> None:
    alice = pki_mod.load_issued(pki.directory / "devices", "alice")
    cert, key = pki_mod.write_issued(tmp_path, "alice", alice)
    with pytest.raises(ConfigError, match="does not allow serverAuth"):
        CertificateSource(cert, key, pki.device_ca)
    server_cert, server_key = pki.directory / "server.pem", pki.directory / "server.key"
    with pytest.raises(ConfigError, match="is not a CA's"):
        CertificateSource(server_cert, server_key, cert)
    CertificateSource(server_cert, server_key, pki.device_ca)  # the real files serve


@pytest.mark.parametrize(
    "host", ["", " localhost", "*", "*.example.com", "bad_name!", "10.0.0.0/8", "a\x00b", "localhost\n", "::1%eth0"]
)
def test_pki_refuses_a_server_host_no_certificate_should_carry_before_creating_anything(tmp_path, host) -> None:
    target = tmp_path / "pki"
    with pytest.raises(pki_mod.PkiError, match="must be a DNS name or an IP address"):
        pki_mod.init_pki(target, hosts=["localhost", host])  # "localhost\n" was written with its newline
    assert not target.exists()


def test_pki_writes_an_internationalised_host_in_its_ascii_form(tmp_path) -> None:
    p = pki_mod.init_pki(tmp_path / "pki", hosts=["ünicode.example", "::1"])
    leaf = pki_mod.load_issued(p.directory, "server").cert
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["xn--nicode-2ya.example"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["::1"]


def test_a_chain_file_with_the_leaf_after_its_issuer_is_named_as_out_of_order(pki, tmp_path) -> None:
    alice = pki_mod.load_issued(pki.directory / "devices", "alice")
    device_ca = pki_mod.load_issued(pki.directory, "device-ca")
    chain = tmp_path / "chain.pem"
    chain.write_bytes(device_ca.cert_pem + alice.cert_pem)
    with pytest.raises(ConfigError, match=r"out of order: the certificate of the key .* must come first"):
        TlsIdentity.from_files(pki.pins, chain, pki.device_key("alice"))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_pins_file_or_key_another_user_owns_is_refused_whatever_its_mode(pki, tmp_path) -> None:
    # Its owner can rewrite it: add an anchor to the pins, read the key. Mode 0644 let it through.
    pins = _copy(pki.pins, tmp_path / "pins.txt", 0o644)
    os.chown(pins, 65534, 65534)  # nobody
    with pytest.raises(PinningError, match="belongs to user 65534, not to this user or root"):
        TlsIdentity.from_files(pins, pki.device_cert("alice"), pki.device_key("alice"))
    key = _copy(pki.device_key("alice"), tmp_path / "alice.key", 0o600)
    os.chown(key, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to user 65534"):
        TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), key)


def test_a_key_in_a_kubernetes_secret_volume_is_named_with_the_volume_setting_that_fixes_it(pki, tmp_path) -> None:
    # Secret volumes are read-only links into "..data", 0644 by default: "chmod 600 it" cannot work.
    data = tmp_path / "..2026_11_27" / "tls.key"
    data.parent.mkdir()
    _copy(pki.device_key("alice"), data, 0o644)
    (tmp_path / "..data").symlink_to(data.parent.name)
    key = tmp_path / "tls.key"
    key.symlink_to("..data/tls.key")
    with pytest.raises(ConfigError, match=r"a link to .*tls\.key\).*set its defaultMode to 0400"):
        TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), key)
