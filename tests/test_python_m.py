"""`python -m specsteer.<package>` runs that package's command, as its console script does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["sdk", "server", "audit", "privacy", "federation"])
def test_python_m_package_runs_its_command(package: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", f"specsteer.{package}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {package} "), proc.stdout
    assert "Traceback" not in proc.stderr
