"""Runs against real Flower processes: submitting to a flower-superlink, and loopback TLS material.

`submit_run` is what ``federation run --superlink HOST:PORT`` does: it writes a throw-away Flower
app folder (a pyproject.toml whose ``[tool.flwr.app]`` points at this package's ServerApp and
ClientApp; the code itself is the installed package) and a Flower configuration naming the
SuperLink, then calls Flower's own ``flwr run`` and waits for the run to finish. The SuperLink and
every SuperNode import ``federation`` from their own environment, with runtime dependency
installation disabled, so nothing is downloaded when a run starts.

`write_loopback_certificates` makes a private CA and a server certificate for 127.0.0.1 /
localhost — what the tests and a single-machine deployment need for TLS on loopback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsteer.core.errors import ConfigError
from specsteer.federation.offline import OFFLINE_ENV
from specsteer.server.pki import issue_leaf, new_ca

__all__ = [
    "APP_NAME",
    "LoopbackCertificates",
    "app_pyproject",
    "flower_env",
    "submit_run",
    "write_loopback_certificates",
]

APP_NAME = "specsteer-federation"
APP_VERSION = "0.1.0"
_RUN_ID = re.compile(r"run[- _]?(?:id)?\D{0,3}(\d{3,})", re.IGNORECASE)


def flower_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for any Flower process we start: offline, no telemetry, no installs."""
    env = dict(os.environ)
    env.update(OFFLINE_ENV)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def app_pyproject(run_config: Mapping[str, Any] | None = None) -> str:
    """The pyproject.toml of the Flower app (the same sections the project's own pyproject carries)."""
    from specsteer.federation.task import TaskConfig

    defaults: dict[str, Any] = {
        **TaskConfig().as_run_config(),
        "server-state-dir": "~/.specsteer/federation/server",
        "num-server-rounds": 1,
        "min-clients": 2,
        "fraction-train": 1.0,
        "fraction-evaluate": 1.0,
        "round-timeout": 3600.0,
        "require-idle": True,
        "require-charging": True,
        "require-unmetered": True,
        "secagg": False,
        "secagg-shares": 1.0,
        "secagg-threshold": 0.67,
    }
    defaults.update(run_config or {})
    lines = [
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        f'name = "{APP_NAME}"',
        f'version = "{APP_VERSION}"',
        'description = "SpecSteer: federated LoRA tuning of per-device Specialists"',
        "dependencies = []",
        "",
        "[tool.flwr.app]",
        'publisher = "specsteer"',
        "",
        "[tool.flwr.app.components]",
        'serverapp = "specsteer.federation.server_app:app"',
        'clientapp = "specsteer.federation.client_app:app"',
        "",
        "[tool.flwr.app.config]",
        *(f"{key} = {_toml_value(value)}" for key, value in defaults.items()),
        "",
    ]
    return "\n".join(lines)


def submit_run(
    superlink: str,
    run_config: Mapping[str, Any],
    *,
    root_certificates: Path | None,
    insecure: bool = False,
    stream: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Start a run on the SuperLink at `superlink` with `flwr run`, wait for it, return its summary.

    The summary is read from the server state folder named in the run config, which is on this
    machine when the SuperLink is (the loopback deployment); otherwise the run id is reported.
    """
    if root_certificates is None and not insecure:
        raise ConfigError("--superlink needs --root-certificates CA.pem (the SuperLink's TLS CA), or --insecure.")
    if root_certificates is not None and not Path(root_certificates).is_file():
        raise ConfigError(f"The CA certificate {root_certificates} does not exist.")
    flwr = shutil.which("flwr", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if flwr is None:
        raise ConfigError("Flower's `flwr` command is not installed in this environment (pip install flwr==1.41.0).")
    with tempfile.TemporaryDirectory(prefix="specsteer-flwr-") as tmp:
        home = Path(tmp) / "flwr-home"
        app_dir = Path(tmp) / "app"
        home.mkdir()
        app_dir.mkdir()
        (app_dir / "pyproject.toml").write_text(app_pyproject(), encoding="utf-8")
        (app_dir / "README.md").write_text("SpecSteer federation app (code: the installed `federation` package).\n")
        connection = ["[superlink]", 'default = "specsteer"', "", "[superlink.specsteer]", f'address = "{superlink}"']
        if insecure:
            connection.append("insecure = true")
        else:
            assert root_certificates is not None  # refused above without --insecure
            connection.append(f"root-certificates = {json.dumps(str(Path(root_certificates).resolve()))}")
        (home / "config.toml").write_text("\n".join(connection) + "\n", encoding="utf-8")
        overrides = " ".join(f"{key}={_toml_value(value)}" for key, value in run_config.items())
        command = [flwr, "run", str(app_dir), "specsteer", "--stream", "--run-config", overrides]
        try:
            done = subprocess.run(
                command,
                env=flower_env({"FLWR_HOME": str(home)}),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ConfigError(f"The run on {superlink} did not finish within {timeout:g} s.") from None
        output = done.stdout + done.stderr
        if stream:
            sys.stderr.write(output)
        if done.returncode != 0 or "Successfully started run" not in output:
            raise ConfigError(f"flwr run against {superlink} failed: {_last_line(output)}.")
    match = re.search(r"Successfully started run (\d+)", output)
    run_id = int(match.group(1)) if match else None
    return _summary_for(run_config, run_id) or {"run_id": run_id, "rounds": []}


def _summary_for(run_config: Mapping[str, Any], run_id: int | None) -> dict[str, Any] | None:
    from specsteer.federation.server_app import RUN_LOG

    log = Path(str(run_config.get("server-state-dir", ""))).expanduser() / RUN_LOG
    deadline = time.time() + 10  # the ServerApp writes its summary as its last act
    while time.time() < deadline:
        if log.is_file():
            for line in reversed(log.read_text(encoding="utf-8").splitlines()):
                if line.strip():
                    summary = json.loads(line)
                    if run_id is None or summary.get("run_id") == run_id:
                        return summary
        time.sleep(0.5)
    return None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


@dataclass(frozen=True)
class LoopbackCertificates:
    ca: Path
    certificate: Path
    key: Path


def write_loopback_certificates(folder: str | Path, *, days: int = 30) -> LoopbackCertificates:
    """A private CA and a server certificate for 127.0.0.1, ::1 and localhost, as PEM files.

    The certificates come from `server.pki`, the project's one x509 builder.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    ca = new_ca("SpecSteer federation loopback CA", days=days)
    leaf = issue_leaf(ca, "localhost", hosts=("localhost", "127.0.0.1", "::1"), days=days)
    paths = LoopbackCertificates(out / "ca.crt", out / "server.pem", out / "server.key")
    paths.ca.write_bytes(ca.cert_pem)
    paths.certificate.write_bytes(leaf.cert_pem)
    paths.key.write_bytes(leaf.key_pem)
    paths.key.chmod(0o600)
    return paths


if __name__ == "__main__":
    # `python -m federation.deploy certs DIR`: loopback TLS material for a single-machine deployment.
    if len(sys.argv) == 3 and sys.argv[1] == "certs":
        made = write_loopback_certificates(sys.argv[2])
        print(f"wrote {made.ca}, {made.certificate}, {made.key}")
        sys.exit(0)
    print("usage: python -m federation.deploy certs DIR", file=sys.stderr)
    sys.exit(2)
