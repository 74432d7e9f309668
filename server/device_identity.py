"""Device certificates checked as X.509 paths to the device CA, by `cryptography`'s verifier.

gRPC's TLS stack already refuses a client certificate that chains to no trusted CA, but it does
not enforce the device CA's path length: a leaf issued with CA:TRUE could issue a certificate
for any other device name and be served under that name. So each stream's certificate is checked
again here, as a whole path, by `cryptography.x509.verification` (RFC 5280 with the Web PKI's
profile), never by hand:

    anchors          only the device CA certificates the server loads for client authentication
    basic constraints  every issuer a CA within its path length; the leaf not a CA
    key usage        an issuer may sign certificates; a leaf that declares usages signs, never issues
    EKU              the leaf is for TLS client authentication
    validity         every certificate on the path is valid now
    key strength     every key below the anchor RSA >= 2048 bits or EC on P-256/P-384/P-521
                     (or Ed25519/Ed448): the verifier alone does not check the leaf's

A device certificate needs no subjectAltName: `server pki issue-device` never wrote one, and the
device's name is its one CN (`server.service.device_name`). So a path through a CA with name
constraints is refused: those constrain subjectAltNames, not the CN that names the device.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence

from cryptography import x509
from cryptography.x509.verification import (
    ClientVerifier,
    Criticality,
    ExtensionPolicy,
    Policy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from specsteer.core.tls_identity import KEY_RULE, weak_key
from specsteer.server.errors import NotADevice

__all__ = ["DeviceCertificates", "NotADevice"]

# cryptography's messages end by naming the certificate's Python repr: not for a device's eyes.
_ENCOUNTERED = re.compile(r"\s*\(encountered processing <Certificate.*$", re.DOTALL)


def _leaf_key_usage(policy: Policy, cert: x509.Certificate, usage: x509.KeyUsage | None) -> None:
    # Absent, the usages are unrestricted (RFC 5280), and the device certificates issued before
    # `server pki` wrote one must keep working; present, it must allow the TLS signature and
    # must not allow issuing certificates.
    if usage is None:
        return
    if usage.key_cert_sign:
        raise ValueError("a device certificate's key usage must not allow signing certificates")
    if not usage.digital_signature:
        raise ValueError("a device certificate's key usage must allow digital signatures")


_LEAF_POLICY = (
    ExtensionPolicy.webpki_defaults_ee()
    .may_be_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
    .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _leaf_key_usage)
)
_CA_POLICY = ExtensionPolicy.webpki_defaults_ca()


class DeviceCertificates:
    """Checks device certificate paths against the anchors `anchors()` returns at each check.

    `anchors` is called per check, so a reloaded client CA file takes effect with gRPC's own.
    """

    def __init__(self, anchors: Callable[[], Sequence[x509.Certificate]]) -> None:
        self._anchors = anchors
        self._store: tuple[tuple[x509.Certificate, ...], Store] | None = None

    def _verifier(self, now: dt.datetime) -> ClientVerifier:
        anchors = tuple(self._anchors())
        if not anchors:
            raise NotADevice("the verifier trusts no device CA")
        if self._store is None or self._store[0] != anchors:
            self._store = (anchors, Store(list(anchors)))
        return (
            PolicyBuilder()
            .store(self._store[1])
            .time(now)
            .extension_policies(ca_policy=_CA_POLICY, ee_policy=_LEAF_POLICY)
            .build_client_verifier()
        )

    def verify(
        self, leaf: x509.Certificate, presented: Sequence[x509.Certificate] = (), *, now: dt.datetime | None = None
    ) -> None:
        """Refuse (`NotADevice`) a `leaf` without a valid path to a device CA; `presented` (the
        peer's other certificates) serve as intermediates only, never as anchors."""
        verifier = self._verifier(now or dt.datetime.now(dt.UTC))
        intermediates = [cert for cert in presented if cert != leaf]
        try:
            verified = verifier.verify(leaf, intermediates)
        except VerificationError as exc:
            reason = _ENCOUNTERED.sub("", str(exc)).removeprefix("validation failed: ")
            raise NotADevice(f"the client certificate is not a valid device certificate: {reason}") from None
        # cryptography's verifier checks the issuers' signatures, not how strong the leaf's key is:
        # an RSA-1024 or P-224 device key would be served. Every certificate below the anchor is checked.
        for cert in verified.chain[:-1]:
            weak = weak_key(cert.public_key())
            if weak is not None:
                what = "client certificate" if cert == leaf else "client certificate's issuer"
                raise NotADevice(f"the {what} has {weak}, too weak: a device certificate's key must be {KEY_RULE}")
        # Name constraints bind subjectAltNames, and a device's name is its CN: a tenant's sub-CA
        # constrained to its own names could still issue any device name. Refused, not half-applied.
        for issuer in verified.chain[1:]:
            try:
                issuer.extensions.get_extension_for_class(x509.NameConstraints)
            except x509.ExtensionNotFound:
                continue
            raise NotADevice(
                "the client certificate is issued under a CA with name constraints, which do not bind "
                "a device's name (its CN); such CAs are not supported"
            )
