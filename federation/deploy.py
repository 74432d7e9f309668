"""Runs against real Flower processes: submitting to a flower-superlink, and loopback TLS material.

`submit_run` is what ``federation run --superlink HOST:PORT`` does: it writes a throw-away Flower
app folder (a pyproject.toml whose ``[tool.flwr.app]`` points at this package's ServerApp and
ClientApp; the code itself is the installed package) and a Flower configuration naming the
SuperLink, then calls Flower's own ``flwr run`` and waits for the run to finish. The SuperLink and
every SuperNode import ``federation`` from their own environment, with runtime dependency
installation disabled, so nothing is downloaded when a run starts.

`write_loopback_certificates` makes a private CA and a server certificate for 127.0.0.1 /
localhost — what the tests and a single-machine deployment need for TLS on loopback.

Node authentication (issue #50, finding 1) is Flower 1.41's own: the SuperLink runs with
``--enable-supernode-auth``, which turns off the Fleet API's self-registration, so only a SuperNode
whose public key was registered through the Control API (``flwr supernode register``) can activate,
and every Fleet request it sends is signed (a timestamp, ECDSA) with the private key given to
``flower-supernode --auth-supernode-private-key``. `provision_deployment` writes each device's key
pair (NIST P-384, OpenSSH format, what Flower loads) beside the CA its TLS trusts, and the
allow-list of their public keys; `register_nodes` enters that list into the SuperLink's database.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsteer.core.errors import ConfigError
from specsteer.core.fileio import create_private
from specsteer.federation.offline import OFFLINE_ENV
from specsteer.server.pki import issue_leaf, new_ca

__all__ = [
    "ALLOW_LIST",
    "APP_NAME",
    "Deployment",
    "LoopbackCertificates",
    "app_pyproject",
    "flower_env",
    "provision_deployment",
    "register_allow_list",
    "register_nodes",
    "submit_run",
    "superlink_command",
    "supernode_command",
    "write_loopback_certificates",
    "write_node_key",
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
    flwr = _flwr_command()
    with tempfile.TemporaryDirectory(prefix="specsteer-flwr-") as tmp:
        home = _flwr_home(Path(tmp), superlink, root_certificates, insecure)
        app_dir = Path(tmp) / "app"
        app_dir.mkdir()
        (app_dir / "pyproject.toml").write_text(app_pyproject(), encoding="utf-8")
        (app_dir / "README.md").write_text("SpecSteer federation app (code: the installed `federation` package).\n")
        overrides = " ".join(f"{key}={_toml_value(value)}" for key, value in run_config.items())
        command = [flwr, "run", str(app_dir), "specsteer", "--stream", "--run-config", overrides]
        done = _run_flwr(command, home, timeout, f"The run on {superlink}")
        output = done.stdout + done.stderr
        if stream:
            sys.stderr.write(output)
        if done.returncode != 0 or "Successfully started run" not in output:
            raise ConfigError(f"flwr run against {superlink} failed: {_last_line(output)}.")
    match = re.search(r"Successfully started run (\d+)", output)
    run_id = int(match.group(1)) if match else None
    return _summary_for(run_config, run_id) or {"run_id": run_id, "rounds": []}


def _flwr_command() -> str:
    flwr = shutil.which("flwr", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if flwr is None:
        raise ConfigError("Flower's `flwr` command is not installed in this environment (pip install flwr==1.41.0).")
    return flwr


def _run_flwr(command: list[str], home: Path, timeout: float | None, what: str) -> subprocess.CompletedProcess[str]:
    """The `flwr` command with `home` as its FLWR_HOME, its output captured; one sentence naming
    `what` if it overruns `timeout`."""
    try:
        return subprocess.run(
            command,
            env=flower_env({"FLWR_HOME": str(home)}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{what} did not finish within {timeout:g} s.") from None


def _flwr_home(tmp: Path, superlink: str, root_certificates: Path | None, insecure: bool) -> Path:
    """A throw-away FLWR_HOME whose configuration names the SuperLink as connection "specsteer"."""
    home = tmp / "flwr-home"
    home.mkdir()
    connection = ["[superlink]", 'default = "specsteer"', "", "[superlink.specsteer]", f'address = "{superlink}"']
    if insecure:
        connection.append("insecure = true")
    else:
        assert root_certificates is not None  # the callers refuse this without --insecure
        connection.append(f"root-certificates = {json.dumps(str(Path(root_certificates).resolve()))}")
    (home / "config.toml").write_text("\n".join(connection) + "\n", encoding="utf-8")
    return home


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


ALLOW_LIST = "allow-list.txt"
NODE_KEY = "node.key"
NODE_PUBLIC_KEY = "node.pub"
_DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def write_node_key(folder: str | Path) -> tuple[Path, Path]:
    """A SuperNode's authentication key pair in `folder`: ``node.key`` (0600) and ``node.pub``.

    NIST P-384 in OpenSSH format, the curve `flwr supernode register` recommends and the format
    `flower-supernode --auth-supernode-private-key` loads. An existing key is kept (its public key
    is what the SuperLink has registered), never overwritten.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    private, public = out / NODE_KEY, out / NODE_PUBLIC_KEY
    if private.is_file():
        key = serialization.load_ssh_private_key(private.read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"{private} is not an EC private key; move it away to provision a new one.")
    else:
        key = ec.generate_private_key(ec.SECP384R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        create_private(private, pem)
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    public.write_bytes(line + b"\n")
    return private, public


@dataclass(frozen=True)
class Deployment:
    """What `provision_deployment` wrote: the TLS material, each device's folder, the allow-list."""

    certificates: LoopbackCertificates
    devices: dict[str, Path]
    allow_list: Path

    def node_key(self, device: str) -> Path:
        return self.devices[device] / NODE_KEY


def provision_deployment(folder: str | Path, devices: Sequence[str], *, days: int = 30) -> Deployment:
    """TLS certificates for the SuperLink and, for each device, a folder with its identity.

    ``certs/`` holds the CA and the server certificate (`write_loopback_certificates`, made once and
    kept); ``devices/<name>/`` the CA the device's TLS trusts (``ca.crt``) beside its node key pair
    (`write_node_key`), the enrollment public key and the node key's endorsement by it
    (`federation.identity`: what binds the device's SecAgg+ keys to it); ``allow-list.txt`` every
    device's public key, one a line, which `register_nodes` enters into the SuperLink;
    ``enrollment/enrollment.key`` the key that endorses devices, which belongs on no server.
    Running it again keeps every key it made and adds the devices it has not seen.
    """
    out = Path(folder)
    names = list(devices)
    bad = [n for n in names if not _DEVICE_NAME.fullmatch(n)]
    if bad or not names or len(set(names)) != len(names):
        raise ConfigError(
            "Device names must be distinct, non-empty and made of letters, digits, '.', '_' or '-' "
            f"(got {', '.join(map(repr, bad or names))})."
        )
    certs_dir = out / "certs"
    made = LoopbackCertificates(certs_dir / "ca.crt", certs_dir / "server.pem", certs_dir / "server.key")
    if not all(p.is_file() for p in (made.ca, made.certificate, made.key)):
        made = write_loopback_certificates(certs_dir, days=days)
    from cryptography.hazmat.primitives import serialization

    from specsteer.federation.identity import (
        ENDORSEMENT,
        ENROLLMENT_PUBLIC_KEY,
        endorse,
        load_enrollment_key,
        write_enrollment_key,
    )

    enrollment_key, enrollment_public = write_enrollment_key(out / "enrollment")
    enrollment = load_enrollment_key(enrollment_key)
    folders: dict[str, Path] = {}
    for name in names:
        device = out / "devices" / name
        private, _ = write_node_key(device)
        shutil.copyfile(made.ca, device / "ca.crt")
        shutil.copyfile(enrollment_public, device / ENROLLMENT_PUBLIC_KEY)
        node = serialization.load_ssh_private_key(private.read_bytes(), None)
        (device / ENDORSEMENT).write_bytes(endorse(enrollment, node.public_key()))  # type: ignore[arg-type]
        folders[name] = device
    every = sorted(p.parent.name for p in (out / "devices").glob(f"*/{NODE_PUBLIC_KEY}"))
    allow = out / ALLOW_LIST
    allow.write_text(
        "".join((out / "devices" / n / NODE_PUBLIC_KEY).read_text(encoding="utf-8") for n in every), encoding="utf-8"
    )
    return Deployment(made, folders, allow)


def register_nodes(
    superlink: str,
    public_keys: Sequence[Path],
    *,
    root_certificates: Path | None,
    insecure: bool = False,
    timeout: float = 60.0,
) -> list[int | None]:
    """Enter each public key into the SuperLink's allow-list with Flower's ``flwr supernode register``.

    Returns the node id the SuperLink gave each key, or None for a key it already held (running the
    registration again is harmless). Anything else Flower refuses is a `ConfigError` in one sentence.
    """
    if root_certificates is None and not insecure:
        raise ConfigError("Registering nodes needs --root-certificates CA.pem (the SuperLink's TLS CA), or --insecure.")
    missing = [str(p) for p in public_keys if not Path(p).is_file()]
    if missing:
        raise ConfigError(f"The public key file {missing[0]} does not exist.")
    flwr = _flwr_command()
    ids: list[int | None] = []
    with tempfile.TemporaryDirectory(prefix="specsteer-flwr-") as tmp:
        home = _flwr_home(Path(tmp), superlink, root_certificates, insecure)
        for key in public_keys:
            command = [flwr, "supernode", "register", str(Path(key).resolve()), "specsteer", "--format", "json"]
            done = _run_flwr(command, home, timeout, f"Registering {key} with {superlink}")
            output = done.stdout + done.stderr
            found = re.search(r'"node-id":\s*(\d+)', output)
            if done.returncode == 0 and found:
                ids.append(int(found.group(1)))
            elif "already in use" in output.lower():
                ids.append(None)
            else:
                raise ConfigError(f"flwr supernode register {key} against {superlink} failed: {_last_line(output)}.")
    return ids


def register_allow_list(
    superlink: str, allow_list: Path, *, root_certificates: Path | None, insecure: bool = False
) -> list[int | None]:
    """`register_nodes` for every public key of an allow-list (one OpenSSH public key a line)."""
    try:
        lines = [ln.strip() for ln in Path(allow_list).read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"The allow-list {allow_list} cannot be read.") from None
    if not lines:
        raise ConfigError(f"The allow-list {allow_list} holds no public key.")
    with tempfile.TemporaryDirectory(prefix="specsteer-keys-") as tmp:
        files = []
        for i, line in enumerate(lines):
            path = Path(tmp) / f"node{i}.pub"
            path.write_text(line + "\n", encoding="utf-8")
            files.append(path)
        return register_nodes(superlink, files, root_certificates=root_certificates, insecure=insecure)


def superlink_command(
    certificates: LoopbackCertificates,
    database: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 9092,
    node_auth: bool = True,
    executable: str = "flower-superlink",
) -> list[str]:
    """The ``flower-superlink`` command of a deployment: TLS, no runtime installs, node authentication on.

    ``node_auth=False`` is the one way to start a SuperLink that accepts any SuperNode, for a
    caller that knows why it wants one.
    """
    command = [
        executable,
        "--ssl-ca-certfile", str(certificates.ca),
        "--ssl-certfile", str(certificates.certificate),
        "--ssl-keyfile", str(certificates.key),
        "--database", str(database),
        "--host", host,
        "--port", str(port),
        "--disable-runtime-dependency-installation",
    ]  # fmt: skip
    if node_auth:
        command.append("--enable-supernode-auth")
    return command


def supernode_command(
    device: Path,
    superlink: str,
    *,
    port: int,
    node_config: str,
    executable: str = "flower-supernode",
) -> list[str]:
    """The ``flower-supernode`` command of a device `provision_deployment` made: its CA and its node key.

    The node config gains ``identity-dir`` (the device's folder), so the ClientApp binds its
    SecAgg+ keys to its node key and requires its neighbours' to be bound too.
    """
    node_config = f"{node_config} identity-dir={json.dumps(str(device.resolve()))}".strip()
    return [
        executable,
        "--root-certificates", str(device / "ca.crt"),
        "--superlink", superlink,
        "--port", str(port),
        "--auth-supernode-private-key", str(device / NODE_KEY),
        "--node-config", node_config,
    ]  # fmt: skip


if __name__ == "__main__":
    # `python -m federation.deploy certs DIR`: loopback TLS material for a single-machine deployment.
    if len(sys.argv) == 3 and sys.argv[1] == "certs":
        made = write_loopback_certificates(sys.argv[2])
        print(f"wrote {made.ca}, {made.certificate}, {made.key}")
        sys.exit(0)
    print("usage: python -m federation.deploy certs DIR", file=sys.stderr)
    sys.exit(2)
