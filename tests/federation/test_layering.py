"""The federation package's place in the house, read from the imports.

The device SDK and the cloud server read adapters through `core.adapters`, never `federation`;
there is no import cycle inside `federation` (secagg <-> server_app shared their round
bookkeeping); importing `federation` leaves the environment alone; the entry points make it offline.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.test_architecture import ROOT, imports_of

OFFLINE_KEYS = ("FLWR_TELEMETRY_ENABLED", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def test_sdk_and_server_read_adapters_without_federation() -> None:
    assert "federation" not in imports_of("sdk"), imports_of("sdk").get("federation")
    assert "federation" not in imports_of("server"), imports_of("server").get("federation")


def test_core_adapters_imports_only_core() -> None:
    tree = ast.parse((ROOT / "core" / "adapters.py").read_text(encoding="utf-8"))
    ours = {"sdk", "server", "federation", "privacy", "audit", "demo", "bench"}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    assert not found & ours, found & ours


def _federation_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "federation").glob("*.py")):
        name = path.stem
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("federation."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("federation."))
        graph[name] = deps - {name}
    return graph


def test_no_import_cycle_inside_federation() -> None:
    graph = _federation_graph()
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 1:
            raise AssertionError(f"import cycle: {' -> '.join([*trail, node])}")
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            visit(dep, [*trail, node])
        state[node] = 2

    for module in graph:
        visit(module, [])


def _env_after(code: str) -> dict[str, str | None]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_KEYS}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{code}\nimport os, json\nprint(json.dumps({{k: os.environ.get(k) for k in {OFFLINE_KEYS!r}}}))",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_federation_does_not_touch_the_environment(tmp_path: Path) -> None:
    imported = _env_after(
        "import specsteer.federation, specsteer.federation.budget_ledger, specsteer.federation.offline\n"
        "import specsteer.federation.cli"
    )
    assert imported == dict.fromkeys(OFFLINE_KEYS), imported
    # The CLI, where a run starts, does it explicitly (status is the cheapest command).
    ran = _env_after(
        f"import specsteer.federation.cli\nspecsteer.federation.cli.main(['status', '--state-dir', {str(tmp_path)!r}])"
    )
    assert ran == {"FLWR_TELEMETRY_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, ran
