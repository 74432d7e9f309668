"""The repository ships the license pyproject.toml declares: the Apache License 2.0, verbatim."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the text every Apache-2.0 project copies.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_file_is_the_apache_2_0_text() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert "Apache-2.0" in str(declared)
    license_file = ROOT / "LICENSE"
    assert license_file.is_file(), "pyproject.toml says Apache-2.0 but there is no LICENSE file"
    text = license_file.read_text(encoding="utf-8")
    header = [line.strip() for line in text.strip().splitlines()[:3]]
    assert header == ["Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/"]
    assert "END OF TERMS AND CONDITIONS" in text
    assert hashlib.sha256(license_file.read_bytes()).hexdigest() == APACHE_2_0_SHA256
