"""A verifier fleet on one host: N `server serve` replicas behind HAProxy (issue #47, docs/fleet.md).

    python -m deploy.fleet render --replicas 3 --port 50051 --state-dir /srv/fleet     # haproxy.cfg on stdout
    python -m deploy.fleet check  --replicas 3 --port 50051 --state-dir /srv/fleet     # `haproxy -c` on it
    python -m deploy.fleet run    --replicas 3 --port 50051 --state-dir /srv/fleet --tls-dir pki \\
        [--per-source 64] [--rate 200] [--hello-deadline 5] [--drain-grace 120] [--adapters-dir STORE] \
        -- [server serve options]
    python -m deploy.fleet restart --state-dir /srv/fleet    # rolling restart of the running fleet (SIGHUP)

`run` renders deploy/haproxy.cfg into the state folder, starts each replica (`server serve
--replica rI`, its transcript in STATE/transcripts, its readiness on its metrics port) and then
HAProxy, and supervises them: a replica that dies is started again; SIGHUP (what `restart` sends)
restarts the replicas one at a time, each drained first; SIGTERM or SIGINT drains every replica and
stops. Replica i listens on 127.0.0.1, gRPC on `--replica-port + i` and readiness on
`--replica-port + 100 + i`: only HAProxy should reach them (docs/fleet.md says why and how).

`Fleet` is the same as a library, for the tests and `bench/fleet.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType

TEMPLATE = Path(__file__).with_name("haproxy.cfg")
BACKEND = "verifiers"
ROOT = Path(__file__).resolve().parents[1]


class FleetError(Exception):
    """A fleet that cannot be rendered, started or restarted; its message is one sentence."""


@dataclass(frozen=True)
class ProxyLimits:
    """What HAProxy enforces before any byte reaches a replica (deploy/haproxy.cfg)."""

    per_source: int = 64  # connections one source address may hold at once
    rate_per_10s: int = 200  # connections one source address may open per 10 s
    hello_deadline: float = 5.0  # seconds to send a complete TLS ClientHello
    idle_timeout: float = 300.0  # seconds a connection may stay silent (both directions)
    maxconn: int = 4096  # connections held at once, all sources together
    check_interval_ms: int = 500  # readiness probe period per replica

    def __post_init__(self) -> None:
        for name in ("per_source", "rate_per_10s", "maxconn", "check_interval_ms"):
            if getattr(self, name) < 1:
                raise FleetError(f"{name.replace('_', '-')} must be at least 1; got {getattr(self, name)}")
        for name in ("hello_deadline", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise FleetError(f"{name.replace('_', '-')} must be a positive number of seconds")


@dataclass
class Replica:
    name: str
    port: int  # gRPC (mutual TLS), what HAProxy forwards to
    health_port: int  # plain HTTP /readyz, what HAProxy probes
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    starts: int = 0


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def render(replicas: Sequence[Replica], *, bind: str, admin_socket: Path, pidfile: Path, limits: ProxyLimits) -> str:
    """deploy/haproxy.cfg with its fields filled and one `server` line per replica."""
    servers = "\n".join(
        f"    server {r.name} 127.0.0.1:{r.port} port {r.health_port}" for r in replicas
    )  # `port`: where the readiness probe goes; connections go to the gRPC port
    values = {
        "maxconn": str(limits.maxconn),
        "admin_socket": str(admin_socket),
        "pidfile": str(pidfile),
        "idle_timeout": _ms(limits.idle_timeout),
        "bind": bind,
        "per_source": str(limits.per_source),
        "rate_per_10s": str(limits.rate_per_10s),
        "hello_deadline": _ms(limits.hello_deadline),
        "check_interval": f"{limits.check_interval_ms}ms",
        "servers": servers,
    }

    def fill(match: re.Match[str]) -> str:
        return values[match.group(1)]

    return re.sub(r"\{\{(\w+)\}\}", fill, TEMPLATE.read_text(encoding="utf-8"))


def bind_address(host: str, port: int) -> str:
    """HAProxy's `bind` for a host: `::` is dual-stack (v4-mapped), as `server serve`'s own listener."""
    if host in ("::", "[::]"):
        return f":::{port} v4v6"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def readyz(port: int, timeout: float = 2.0) -> int:
    """The replica's /readyz status (0 if nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def haproxy_binary(name: str = "haproxy") -> str | None:
    return shutil.which(name)


class Fleet:
    """N replicas and HAProxy, started and supervised from this process.

    `serve_args` go to every `server serve` (models, limits); the fleet adds --tls-dir, --host,
    --port, --metrics-port, --replica, --transcript-dir, --drain-grace and --port-file."""

    def __init__(
        self,
        state_dir: Path,
        *,
        replicas: int,
        port: int,
        tls_dir: Path | None = None,
        host: str = "127.0.0.1",
        serve_args: Sequence[str] = (),
        limits: ProxyLimits | None = None,
        drain_grace: float = 120.0,
        replica_ports: Sequence[tuple[int, int]] | None = None,
        haproxy: str = "haproxy",
        env: dict[str, str] | None = None,
    ) -> None:
        if replicas < 1:
            raise FleetError(f"a fleet has at least 1 replica; got {replicas}")
        if replica_ports is not None and len(replica_ports) != replicas:
            raise FleetError("replica_ports needs one (gRPC, readiness) pair per replica")
        self.state_dir = Path(state_dir)
        self.port, self.host = port, host
        self.tls_dir = tls_dir
        self.serve_args = list(serve_args)
        self.limits = limits or ProxyLimits()
        self.drain_grace = drain_grace
        ports = replica_ports or [(free_port(), free_port()) for _ in range(replicas)]
        self.replicas = [Replica(f"r{i}", grpc, health) for i, (grpc, health) in enumerate(ports)]
        self.haproxy_bin = haproxy
        self.haproxy: subprocess.Popen[bytes] | None = None
        self.env = {**os.environ, "GRPC_VERBOSITY": "NONE", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.env.update(env or {})
        self._lock = threading.Lock()  # one restart at a time

    # Where things are.
    @property
    def transcripts(self) -> Path:
        return self.state_dir / "transcripts"

    @property
    def admin_socket(self) -> Path:
        return self.state_dir / "haproxy.sock"

    @property
    def config_path(self) -> Path:
        return self.state_dir / "haproxy.cfg"

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def render(self) -> str:
        return render(
            self.replicas,
            bind=bind_address(self.host, self.port),
            admin_socket=self.admin_socket,
            pidfile=self.state_dir / "haproxy.pid",
            limits=self.limits,
        )

    def write_config(self) -> Path:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.config_path.write_text(self.render(), encoding="utf-8")
        return self.config_path

    def check_config(self) -> None:
        """`haproxy -c` on the rendered file: the shipped template must parse."""
        binary = haproxy_binary(self.haproxy_bin)
        if binary is None:
            raise FleetError(f"{self.haproxy_bin} is not installed (`make install` installs Debian's haproxy)")
        out = subprocess.run([binary, "-c", "-q", "-f", str(self.write_config())], capture_output=True, text=True)
        if out.returncode != 0:
            raise FleetError(f"haproxy refuses {self.config_path}: {(out.stderr or out.stdout).strip()}")

    # Replicas.
    def _replica_command(self, r: Replica) -> list[str]:
        cmd = [sys.executable, "-m", "specsteer.server.cli", "serve", "--host", "127.0.0.1"]
        cmd += ["--port", str(r.port), "--metrics-port", str(r.health_port), "--replica", r.name]
        cmd += ["--transcript-dir", str(self.transcripts), "--drain-grace", str(self.drain_grace)]
        cmd += ["--port-file", str(self.state_dir / f"{r.name}.port")]
        if self.tls_dir is not None:
            cmd += ["--tls-dir", str(self.tls_dir)]
        return cmd + self.serve_args

    def start_replica(self, r: Replica) -> None:
        self.log_path(r.name).parent.mkdir(parents=True, exist_ok=True)
        self.transcripts.mkdir(mode=0o700, parents=True, exist_ok=True)
        log = self.log_path(r.name).open("ab")
        try:
            r.process = subprocess.Popen(
                self._replica_command(r), cwd=ROOT, env=self.env, stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()  # the child holds its own descriptor
        r.starts += 1

    def wait_replica_ready(self, r: Replica, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while readyz(r.health_port) != 200:
            if r.process is None or r.process.poll() is not None:
                tail = self.log_path(r.name).read_text(errors="replace")[-2000:]
                raise FleetError(f"replica {r.name} exited before it was ready; its log ends:\n{tail}")
            if time.monotonic() > deadline:
                raise FleetError(f"replica {r.name} was not ready within {timeout:g} s")
            time.sleep(0.1)

    # HAProxy.
    def start_proxy(self) -> None:
        binary = haproxy_binary(self.haproxy_bin)
        if binary is None:
            raise FleetError(f"{self.haproxy_bin} is not installed (`make install` installs Debian's haproxy)")
        self.write_config()
        with contextlib.suppress(FileNotFoundError):
            self.admin_socket.unlink()
        log = self.log_path("haproxy").open("ab")
        try:
            # -db: in the foreground, so this process supervises it (and its exit is seen).
            self.haproxy = subprocess.Popen(
                [binary, "-db", "-f", str(self.config_path)], stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()
        deadline = time.monotonic() + 30
        while not self.admin_socket.exists():
            if self.haproxy.poll() is not None or time.monotonic() > deadline:
                raise FleetError(f"haproxy did not start; see {self.log_path('haproxy')}")
            time.sleep(0.05)

    def admin(self, command: str) -> str:
        """One command on HAProxy's runtime API (its stats socket), and its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.admin_socket))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def backend_status(self) -> dict[str, str]:
        """Each replica's status as HAProxy sees it: UP, DOWN, DRAIN, MAINT (or a transition, e.g. "UP 1/2")."""
        rows = csv.DictReader(io.StringIO(self.admin("show stat").lstrip("# ")))
        mine = (row for row in rows if row["pxname"] == BACKEND and row["svname"] in self.names)
        return {row["svname"]: row["status"] for row in mine}

    @property
    def names(self) -> set[str]:
        return {r.name for r in self.replicas}

    def wait_status(self, name: str, status: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.backend_status().get(name) != status:
            if time.monotonic() > deadline:
                raise FleetError(f"haproxy did not see {name} {status} within {timeout:g} s: {self.backend_status()}")
            time.sleep(0.05)

    # The whole fleet.
    def start(self, timeout: float = 300.0) -> None:
        """Every replica (at once), then HAProxy; returns once HAProxy sees every replica UP."""
        for r in self.replicas:
            self.start_replica(r)
        for r in self.replicas:
            self.wait_replica_ready(r, timeout)
        self.start_proxy()
        for r in self.replicas:
            self.wait_status(r.name, "UP")

    def restart(self, r: Replica, *, settle: float = 0.5) -> None:
        """Drain one replica and start it again, without a device noticing.

        HAProxy stops sending it connections first (runtime API `state drain`; its readiness probe
        would take up to a probe period, and a connection sent there meanwhile would be refused
        "draining"); `settle` seconds later, so that a connection accepted just before has sent its
        Open, SIGTERM drains the replica: it refuses new Opens and exits once its sessions end (at
        most `drain_grace`). It is started again, HAProxy is told it may send to it, and this returns
        once HAProxy's probe sees it UP."""
        with self._lock:
            self.admin(f"set server {BACKEND}/{r.name} state drain")
            time.sleep(settle)
            if r.process is not None and r.process.poll() is None:
                r.process.send_signal(signal.SIGTERM)
                try:
                    r.process.wait(timeout=self.drain_grace + 30)
                except subprocess.TimeoutExpired:
                    r.process.kill()
                    r.process.wait()
            self.start_replica(r)
            self.wait_replica_ready(r)
            self.admin(f"set server {BACKEND}/{r.name} state ready")
            self.wait_status(r.name, "UP")

    def rolling_restart(self, settle: float = 0.5) -> None:
        for r in self.replicas:
            self.restart(r, settle=settle)

    def kill(self, r: Replica) -> None:
        """kill -9, as a crash: HAProxy's probe takes it out; its open sessions' devices fall back."""
        if r.process is not None and r.process.poll() is None:
            r.process.kill()
            r.process.wait()

    def stop(self, grace: float = 10.0) -> None:
        """Drain every replica (SIGTERM) and stop HAProxy; kill what outlives `grace`."""
        for r in self.replicas:
            if r.process is not None and r.process.poll() is None:
                r.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for r in self.replicas:
            if r.process is not None:
                try:
                    r.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    r.process.kill()
                    r.process.wait()
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            try:
                self.haproxy.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.haproxy.kill()
                self.haproxy.wait()

    def describe(self) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "port": self.port,
            "host": self.host,
            "transcripts": str(self.transcripts),
            "admin_socket": str(self.admin_socket),
            "limits": asdict(self.limits),
            "replicas": [{"name": r.name, "port": r.port, "health_port": r.health_port} for r in self.replicas],
        }

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# The command.
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy.fleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("render", "check", "run"):
        p = sub.add_parser(name)
        p.add_argument("--replicas", type=int, default=3, help="replicas r0..rN-1 (default 3)")
        p.add_argument("--port", type=int, default=50051, help="the devices' port, on HAProxy (default 50051)")
        p.add_argument("--host", default="127.0.0.1", help="the devices' address (:: is dual-stack)")
        p.add_argument("--replica-port", type=int, default=50061, help="replica i: gRPC port +i, readiness +100+i")
        p.add_argument("--state-dir", type=Path, required=True, help="haproxy.cfg, its socket, logs, transcripts")
        p.add_argument("--per-source", type=int, default=64, help="connections one source may hold (64)")
        p.add_argument("--rate", type=int, default=200, help="connections one source may open per 10 s (200)")
        p.add_argument("--hello-deadline", type=float, default=5.0, help="seconds for a TLS ClientHello (5)")
        p.add_argument("--idle-timeout", type=float, default=300.0, help="seconds a silent connection is kept (300)")
        p.add_argument("--maxconn", type=int, default=4096, help="connections held at once (4096)")
        if name == "run":
            p.add_argument("--tls-dir", type=Path, required=True, help="the replicas' `server pki init` folder")
            p.add_argument("--drain-grace", type=float, default=120.0, help="seconds a draining replica waits (120)")
            p.add_argument(
                "--adapters-dir",
                type=Path,
                help="federation's global adapter store, one folder every replica reads (server serve --adapters-dir)",
            )
            p.add_argument("serve_args", nargs="*", help="after --: options for every `server serve`")
    r = sub.add_parser("restart", help="rolling restart of the fleet `run` supervises in STATE_DIR")
    r.add_argument("--state-dir", type=Path, required=True)
    return parser


def _adapters(args: argparse.Namespace) -> list[str]:
    store = getattr(args, "adapters_dir", None)
    return [] if store is None else ["--adapters-dir", str(store.resolve())]


def _fleet(args: argparse.Namespace) -> Fleet:
    limits = ProxyLimits(
        per_source=args.per_source,
        rate_per_10s=args.rate,
        hello_deadline=args.hello_deadline,
        idle_timeout=args.idle_timeout,
        maxconn=args.maxconn,
    )
    ports = [(args.replica_port + i, args.replica_port + 100 + i) for i in range(args.replicas)]
    return Fleet(
        args.state_dir,
        replicas=args.replicas,
        port=args.port,
        host=args.host,
        tls_dir=getattr(args, "tls_dir", None),
        serve_args=[*getattr(args, "serve_args", ()), *_adapters(args)],
        limits=limits,
        drain_grace=getattr(args, "drain_grace", 120.0),
        replica_ports=ports,
    )


def _supervise(fleet: Fleet) -> int:
    stop, restart = threading.Event(), threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_restart(signum: int, frame: FrameType | None) -> None:
        restart.set()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_restart)
    try:
        fleet.start()
        (fleet.state_dir / "fleet.json").write_text(json.dumps(fleet.describe(), indent=2) + "\n", encoding="utf-8")
        print(f"fleet: {len(fleet.replicas)} replicas behind haproxy on {fleet.host}:{fleet.port}", flush=True)
        while not stop.wait(1.0):
            if restart.is_set():
                restart.clear()
                print("fleet: rolling restart", flush=True)
                fleet.rolling_restart()
                print("fleet: rolling restart done", flush=True)
            for r in fleet.replicas:  # a crashed replica comes back; HAProxy probes it in again
                if r.process is not None and r.process.poll() is not None:
                    print(f"fleet: replica {r.name} exited ({r.process.returncode}); starting it again", flush=True)
                    fleet.start_replica(r)
            if fleet.haproxy is not None and fleet.haproxy.poll() is not None:
                raise FleetError(f"haproxy exited ({fleet.haproxy.returncode}); see {fleet.log_path('haproxy')}")
    finally:
        fleet.stop(grace=fleet.drain_grace)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "restart":
            described = json.loads((args.state_dir / "fleet.json").read_text(encoding="utf-8"))
            os.kill(int(described["pid"]), signal.SIGHUP)
            print(f"fleet: asked the supervisor (process {described['pid']}) for a rolling restart")
            return 0
        fleet = _fleet(args)
        if args.command == "render":
            sys.stdout.write(fleet.render())
            return 0
        if args.command == "check":
            fleet.check_config()
            print(f"fleet: haproxy accepts {fleet.config_path}")
            return 0
        return _supervise(fleet)
    except (FleetError, OSError, ValueError, KeyError) as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
