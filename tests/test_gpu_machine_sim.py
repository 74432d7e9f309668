"""tools/gpu_machine: the GPU machine's packages simulated here, for a dry run of tools/gpu_check.sh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import importlib.util
for name in ("flwr", "opacus", "torch", "grpc", "detect_secrets"):
    print(name, importlib.util.find_spec(name) is not None)
try:
    import flwr
except ModuleNotFoundError as exc:
    print("import:", exc.name)
"""


def test_on_its_path_the_packages_that_machine_lacks_are_not_found_and_the_rest_are() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools" / "gpu_machine")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout
    found = dict(line.split() for line in out.splitlines() if not line.startswith("import:"))
    # Not there: flwr, opacus. There or carried (tools/gpu_check.sh): torch, grpc, detect_secrets.
    assert found == {"flwr": "False", "opacus": "False", "torch": "True", "grpc": "True", "detect_secrets": "True"}
    assert "import: flwr" in out
