"""The pin set: pins and anchors must name each other one to one, at least two, or nothing connects."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from specsteer.sdk.pinning import PinningError, load_pin_set, spki_pin
from specsteer.server import pki


@pytest.fixture(scope="module")
def anchors():
    return pki.new_ca("Serving"), pki.new_ca("Backup"), pki.new_ca("Stranger")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pins.txt"
    path.write_text(text)
    return path


def test_pin_is_sha256_of_the_subject_public_key_info(anchors) -> None:
    cert = anchors[0].cert
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert spki_pin(cert) == "sha256/" + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def test_pki_init_writes_a_pin_set_of_serving_ca_and_backup_anchor(tmp_path) -> None:
    # Execute
    p = pki.init_pki(tmp_path / "pki")
    pin_set = load_pin_set(p.pins)
    # Assert: two anchors, the serving CA (which signed the server certificate) and the backup.
    serving = pki.load_issued(p.directory, "ca").cert
    backup = pki.load_issued(p.directory, "backup-ca").cert
    assert pin_set.pins == (spki_pin(serving), spki_pin(backup))
    assert pin_set.anchors == (serving, backup)
    server_cert = pki.load_issued(p.directory, "server").cert
    assert server_cert.issuer == serving.subject != backup.subject
    assert (p.directory / "ca.key").stat().st_mode & 0o077 == 0  # private keys are owner-only


def test_anchors_may_come_from_a_separate_bundle(tmp_path, anchors) -> None:
    serving, backup, _ = anchors
    pins = _write(tmp_path, f"# comment\n\n{spki_pin(serving.cert)}  # serving\n{spki_pin(backup.cert)}\n")
    bundle = tmp_path / "anchors.pem"
    bundle.write_bytes(serving.cert_pem + backup.cert_pem)
    assert load_pin_set(pins, bundle).root_pem == serving.cert_pem + backup.cert_pem


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda s, b, x: pki.pins_file_text([("only", s.cert)]), "1 pin\\(s\\); at least 2"),
        (lambda s, b, x: pki.pins_file_text([("a", s.cert), ("b", b.cert)]) + x.cert_pem.decode(), "is not pinned"),
        (
            lambda s, b, x: pki.pins_file_text([("a", s.cert), ("b", b.cert)]).replace(
                b.cert_pem.decode(), x.cert_pem.decode()
            ),
            "is not pinned",
        ),
        (lambda s, b, x: f"{spki_pin(s.cert)}\n{spki_pin(b.cert)}\n" + s.cert_pem.decode(), "names no anchor"),
        (lambda s, b, x: f"{spki_pin(s.cert)}\n{spki_pin(s.cert)}\n" + s.cert_pem.decode(), "lists a pin twice"),
        (lambda s, b, x: "sha1/AAAA\n", "line 1 is not a pin"),
        (lambda s, b, x: "sha256/" + base64.b64encode(b"short").decode() + "\n", "line 1 is not a pin"),
        (lambda s, b, x: f"{spki_pin(s.cert)} trailing-garbage\n", "line 1 is not a pin"),
        (lambda s, b, x: "-----BEGIN CERTIFICATE-----\nAAAA\n", "not a certificate"),
        (lambda s, b, x: "", "0 pin"),
    ],
    ids=[
        "one-pin",
        "unpinned-extra-anchor",
        "anchor-swapped",
        "pin-without-anchor",
        "duplicate-pin",
        "not-sha256",
        "short-digest",
        "garbage-after-pin",
        "cut-pem",
        "empty",
    ],
)
def test_bad_pin_sets_fail_closed(tmp_path, anchors, build, message) -> None:
    with pytest.raises(PinningError, match=message):
        load_pin_set(_write(tmp_path, build(*anchors)))


def test_missing_pins_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(PinningError, match="does not exist"):
        load_pin_set(tmp_path / "nope.txt")


def test_every_certificate_of_a_pinned_key_is_an_anchor(tmp_path, anchors) -> None:
    # A CA's renewed certificate (same key, later dates) beside the one it replaces: only the first
    # one listed was kept, so a device whose pins file listed the expiring one first was refused.
    serving, backup, _ = anchors
    old = serving.cert
    renewed = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(old.subject)
        .public_key(serving.key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(old.not_valid_before_utc)
        .not_valid_after(old.not_valid_after_utc + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(serving.key, hashes.SHA256())
    )
    text = pki.pins_file_text([("serving", old), ("backup", backup.cert)])
    pin_set = load_pin_set(_write(tmp_path, text + renewed.public_bytes(serialization.Encoding.PEM).decode()))
    assert set(pin_set.anchors) == {old, renewed, backup.cert}
    assert spki_pin(old) == spki_pin(renewed)
