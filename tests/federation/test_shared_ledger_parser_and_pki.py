"""Federation shares its parsers and builders with the rest of the project, so they cannot drift apart.

`federation.budget_ledger` (the device) and `privacy budget` (the auditor) read a ledger through the same
parser, so a ledger one accepts the other cannot reject, with the same sentence; the loopback TLS
material of `federation.deploy` is `server.pki`'s, extensions and all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography import x509

from specsteer.federation.budget_ledger import Ledger, LedgerError
from specsteer.federation.deploy import write_loopback_certificates
from specsteer.privacy.cli import main as privacy_main

GOOD = {
    "format": 1,
    "epsilon_budget": 8.0,
    "delta": 1e-5,
    "accountant": "rdp",
    "epsilon_spent": 0.0,
    "history": [],
    "rounds": [],
    "refusals": 0,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"accountant": "gdp"}, "unknown accountant 'gdp'"),
        ({"epsilon_spent": "lots"}, "epsilon_spent is 'lots'"),
        ({"history": [[1.0, 0.1]]}, "a history entry is not [noise, sample_rate, steps]"),
        ({"refusals": -3}, "refusals is -3"),
    ],
)
def test_device_and_auditor_reject_a_damaged_ledger_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], message: str
) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(LedgerError) as device:
        Ledger.load(path, epsilon_budget=8.0, delta=1e-5)
    assert privacy_main(["budget", "--state-dir", str(tmp_path)]) == 1
    auditor = capsys.readouterr().err
    assert message in str(device.value) and message in auditor
    assert str(device.value) in auditor


def test_loopback_certificates_come_from_server_pki(tmp_path: Path) -> None:
    made = write_loopback_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate(made.ca.read_bytes())
    leaf = x509.load_pem_x509_certificate(made.certificate.read_bytes())
    # server.pki's builder marks its CAs with a subject key id and its leaves with the authority's.
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(n.value) for n in sans} == {"localhost", "127.0.0.1", "::1"}
    assert (made.key.stat().st_mode & 0o777) == 0o600
