"""Slow tier: real flower-superlink and flower-supernode processes on loopback, with TLS.

`federation run --superlink` submits the project's Flower app to the SuperLink; each SuperNode
runs the ClientApp in its own `flwr-clientapp` process. The deployment is `federation deploy`'s:
the SuperLink runs with Flower's node authentication, the two devices' keys are registered, and a
third SuperNode that went through no registration is refused (issue #50, finding 1). The test
also kills a SuperNode while it is training (the round finishes without it after the round
timeout) and restarts the SuperLink (the next run resumes from the stored version, and the
surviving device's ledger keeps counting). Last, the operator seats a pair of SuperNodes of its own
beside a real device (the Sybil attack on secure aggregation, finding 2): the device refuses the
round before any share leaves.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specsteer.federation.cli import main
from specsteer.federation.deploy import (
    Deployment,
    flower_env,
    provision_deployment,
    register_nodes,
    superlink_command,
    supernode_command,
)
from specsteer.federation.errors import SecAggRefusal
from tests.federation.conftest import FIXTURE_USERS

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A Flower process in its own session, so stopping it also stops the processes it spawned."""

    def __init__(self, args: list[str], log: Path, cwd: Path) -> None:
        self.log = log
        env = flower_env({"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "TOKENIZERS_PARALLELISM": "false"})
        # The repository root on the path, as an installed package would be, for the spawned app processes.
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
        self.handle = log.open("w")
        self.popen = subprocess.Popen(
            args, stdout=self.handle, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, count: int = 1, timeout: float = 120) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if self.text().count(needle) >= count:
                return
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.log.name} exited early:\n{self.text()[-3000:]}")
            time.sleep(0.5)
        raise AssertionError(f"{needle!r} not seen {count}x in {self.log.name}:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        # Flower starts its SuperExec in a session of its own, so the process group is not enough:
        # collect every descendant by pid first, and end those too.
        family = _descendants(self.popen.pid)
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # children that outlived the leader
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.handle.close()


def _descendants(root: int) -> list[int]:
    """Pids of every live descendant of `root` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in reversed(started):
        proc.stop()


def _supernode(device: Path, superlink: str, partition: int, model: Path, tmp: Path, state: str, log: str) -> Proc:
    """`federation deploy`'s SuperNode for the identity in `device`: fixture user `partition`, its state
    in ``tmp/state``, its output in ``tmp/log.log``."""
    node_config = (
        f"data-file='{FIXTURE_USERS}' partition-id={partition} state-dir='{tmp / state}' threads=1 model='{model}'"
    )
    command = supernode_command(
        device, superlink, port=_free_port(), node_config=node_config, executable=str(BIN / "flower-supernode")
    )
    return Proc(command, tmp / f"{log}.log", tmp)


def _superlink(tmp: Path, deployment: Deployment, port: int, procs: list[Proc], name: str) -> Proc:
    command = superlink_command(
        deployment.certificates, tmp / "link.db", port=port, executable=str(BIN / "flower-superlink")
    )
    link = Proc(command, tmp / f"{name}.log", tmp)
    procs.append(link)
    link.wait_for("Uvicorn running on https://127.0.0.1", timeout=120)
    return link


def test_superlink_and_two_supernodes_over_tls(tiny_bpe_model: Path, tmp_path: Path, procs: list[Proc]) -> None:
    deployment = provision_deployment(tmp_path / "deploy", ["device0", "device1", "device2"])
    port = _free_port()
    superlink = f"127.0.0.1:{port}"
    link = _superlink(tmp_path, deployment, port, procs, "superlink")
    node_ids = register_nodes(
        superlink, [d / "node.pub" for d in deployment.devices.values()], root_certificates=deployment.certificates.ca
    )
    assert all(isinstance(i, int) for i in node_ids) and len(set(node_ids)) == 3
    # Registering again is harmless (a re-run of the deployment step).
    assert register_nodes(
        superlink, [deployment.devices["device0"] / "node.pub"], root_certificates=deployment.certificates.ca
    ) == [None]
    nodes = []
    for i in range(3):
        device = f"device{i}"
        node = _supernode(deployment.devices[device], superlink, i, tiny_bpe_model, tmp_path, device, f"supernode{i}")
        procs.append(node)
        nodes.append(node)
    # A SuperNode that reaches the SuperLink and trusts its CA, but holds no registered key (Flower
    # gives it a fresh key pair of its own), as any process on the network could start.
    stranger = Proc(
        [
            str(BIN / "flower-supernode"),
            "--root-certificates", str(deployment.certificates.ca),
            "--superlink", superlink,
            "--port", str(_free_port()),
            "--node-config", f"data-file='{FIXTURE_USERS}' partition-id=2 state-dir='{tmp_path / 'stranger'}'",
        ],
        tmp_path / "stranger.log",
        tmp_path,
    )  # fmt: skip
    procs.append(stranger)
    link.wait_for("Activated node_id", count=3)
    link.wait_for('"POST /v1/fleet/register-node HTTP/1.1" 412', timeout=60)

    base = [
        "run", "--superlink", superlink, "--root-certificates", str(deployment.certificates.ca),
        "--model", str(tiny_bpe_model), "--state-dir", str(tmp_path / "state"), "--json",
        "--dp-steps", "1", "--personal-steps", "1", "--max-len", "256",
    ]  # fmt: skip

    # 1. Two rounds of SecAgg+ with the three authenticated devices, over TLS: each binds its keys
    # to its node key and checks the others' (issue #50, finding 2). The stranger never became a node.
    first = _run_json([*base, "--secagg", "--min-clients", "3", "--rounds", "2"])
    assert (first["version_in"], first["version_out"]) == (0, 2)
    assert [r["replies"] for r in first["rounds"]] == [3, 3]
    assert "https://127.0.0.1" in link.text() and f"http://127.0.0.1:{port}" not in link.text()
    assert link.text().count("Activated node_id") == 3
    assert "Receiving: train message" not in stranger.text()
    assert not (tmp_path / "stranger").exists()
    nodes[2].stop()  # two devices are enough for the rest

    # 2. Device 1 is killed while it trains; the round waits out its timeout and uses device 0.
    seen = nodes[1].text().count("Receiving: train message")
    # A timeout with room for device 0 on a loaded machine (device 2, stopped, is refused at once);
    # the round waits all of it, so no longer than that.
    with _background([*base, "--round-timeout", "60"]) as result:
        nodes[1].wait_for("Receiving: train message", count=seen + 1, timeout=300)
        nodes[1].stop()
    second = result["summary"]
    assert (second["version_in"], second["version_out"]) == (2, 3)
    assert second["rounds"][0]["replies"] == 1

    # 3. The SuperLink restarts; the next run resumes from v3 and device 0's ledger keeps counting.
    link.stop()
    link = _superlink(tmp_path, deployment, port, procs, "superlink-restarted")
    # The SuperNode reconnects by itself (its registration is in the SuperLink's database); the
    # strategy waits up to one round timeout for it.
    nodes[0].wait_for("Connection successful after", timeout=180)
    third = _run_json([*base, "--min-clients", "1", "--round-timeout", "120"])
    assert (third["version_in"], third["version_out"]) == (3, 4)
    ledger = json.loads((tmp_path / "device0" / "ledger.json").read_text())
    assert [r["adapter_version_in"] for r in ledger["rounds"]] == [0, 1, 2, 3]
    assert len(json.loads((tmp_path / "device1" / "ledger.json").read_text())["rounds"]) == 2
    assert "Receiving: train message" not in stranger.text()

    # 4. The Sybil attack on the real SuperLink (issue #50, finding 2): the operator seats a pair of
    # nodes of its own beside device 0, with node keys it registered itself and endorsed with an
    # enrollment key of its own (what it can make without the provisioning key). SecAgg+ with
    # threshold 2 of 3 would let it decrypt device 0's shares; device 0 refuses before any leaves.
    forged = provision_deployment(tmp_path / "server-deploy", ["sybil0", "sybil1"])
    register_nodes(
        superlink, [d / "node.pub" for d in forged.devices.values()], root_certificates=deployment.certificates.ca
    )
    for i, name in enumerate(forged.devices):
        shutil.copyfile(deployment.certificates.ca, forged.devices[name] / "ca.crt")  # the real SuperLink's TLS
        procs.append(_supernode(forged.devices[name], superlink, i + 1, tiny_bpe_model, tmp_path, name, name))
    link.wait_for("Activated node_id", count=2)  # the pair (device 0 reconnected with its stored registration)
    code, out, err = _run([*base, "--secagg", "--min-clients", "3", "--round-timeout", "120"])
    assert code == 1, out + err  # no device trained: a run that made nothing fails
    assert f"3 refused or failed: {SecAggRefusal.public.rstrip('.')} ×3" in err, err  # the operator is told why
    log = [json.loads(line) for line in (tmp_path / "device0" / "rounds.jsonl").read_text().splitlines()]
    assert any("not bound to an enrolled device identity" in e.get("cause", "") for e in log), log[-3:]
    ledger = json.loads((tmp_path / "device0" / "ledger.json").read_text())
    assert [r["adapter_version_in"] for r in ledger["rounds"]] == [0, 1, 2, 3]  # nothing trained, nothing spent


def _run(argv: list[str]) -> tuple[int, str, str]:
    """`federation` with `argv`: its exit code, its stdout and its stderr."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _run_json(argv: list[str]) -> dict:
    code, out, err = _run(argv)
    assert code == 0, out + err
    return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def _background(argv: list[str]) -> Iterator[dict]:
    import threading

    result: dict = {}

    def target() -> None:
        result["summary"] = _run_json(argv)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    yield result
    thread.join(timeout=600)
    assert "summary" in result, "the run did not finish"
