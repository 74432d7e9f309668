"""`server`: the SpecSteer cloud verifier, and the PKI it and its devices use.

    server serve [--config FILE] [--port P] [--generalist M] [--specialist M] [--tls-dir D | --cert F --key F
                 --client-ca F] [--max-sessions N] [--idle-timeout S] [--open-timeout S]
                 [--round-idle-timeout S] [--queue-timeout S] [--slot-min-hold S] [--stream-rate R] [--stream-burst N]
                 [--reserved-sessions N] [--handshake-timeout S] [--connection-idle-timeout S] [--max-connections N]
                 [--max-connections-per-source N] [--kv dynamic|slots] [--kv-forward fused|transformers]
                 [--kv-compile] [--batching on|off] [--max-batch N]
                 [--metrics-port P] [--drain-grace S] [--transcript-dir D] [--replica NAME] ...
    server drain --pid PID                        # the serving process refuses new sessions, lets the open ones
                                                  # end (--drain-grace), exits; SIGTERM does the same
    server pki init --dir D                       # dev CA, server cert (localhost, 127.0.0.1), backup anchor,
                                                  # device CA, pins.txt for devices
    server pki issue-device --dir D --name NAME   # D/devices/NAME.pem + NAME.key
    server pki rotate-server --dir D [--issuer ca|backup-ca]   # a running server picks it up, no restart
    server witness-key --name NAME --out D        # D/NAME.witness.key (serve --witness-key) + .pub (auditors)

Command-line options override the config file. Bad input gets one sentence on stderr and exit
code 1 (2 for usage errors). `serve` checks its whole configuration (TOML, ports, TLS files,
limits, witness key: `server.preflight`) before it imports torch or any model library, so a
mistake is refused in a second, not after the libraries (seconds) and models (minutes) load.
Unless `--max-sessions` (or `[limits] max_sessions`) sets it, the session cap is derived from the
memory free once the models are loaded: as many sessions of the protocol's longest as the dynamic
KV budget (75% of that memory) holds, at most 64 (`server.config.max_sessions_for_memory`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from specsteer.core.cli import EXIT_ERROR, add_quiet, command_parser, finite_float, number, reported, whole_number
from specsteer.core.cli import Parser as _Parser
from specsteer.core.errors import ConfigError
from specsteer.core.fileio import atomic_write
from specsteer.core.placement import DTYPE_CHOICES
from specsteer.server.config import MAX_SESSIONS, SLOT_FORWARDS

log = logging.getLogger("server")

# The CLI's log lines (the libraries only log; the format is the program's): when, level, what.
LOG_FORMAT = "%(asctime)s server: %(levelname)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("server", "the SpecSteer cloud verifier")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the verifier (gRPC over mutual TLS)")
    serve.add_argument("--config", type=Path, help="TOML config file; options below override it")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=whole_number(), help="port (default 50051; 0 picks a free one)")
    serve.add_argument("--port-file", type=Path, help="write the bound port here once serving")
    serve.add_argument(
        "--replica", help="this verifier's name in a fleet (deploy/): its transcript is server-transcript.NAME.jsonl"
    )
    serve.add_argument("--generalist", help="Generalist: folder, .gguf file or embedded name")
    serve.add_argument("--specialist", help="generic Specialist copy (base weights, no personal adapter)")
    serve.add_argument("--cache-dir", type=Path, help="where converted models are kept")
    serve.add_argument(
        "--quantize", choices=["fp32", "int8"], help="cloud models' Linear layers (default fp32; int8: dynamic, AVX2)"
    )
    serve.add_argument("--device", help="where the cloud models run: cpu (default), cuda or cuda:N")
    serve.add_argument("--dtype", choices=DTYPE_CHOICES, help="the cloud models' weights (default float32)")
    serve.add_argument(
        "--kv", choices=("dynamic", "slots"), help="sessions' KV: a cache each (default) or the slot pool (docs/gpu.md)"
    )
    serve.add_argument("--kv-slots", type=whole_number(1), help="slot pool: slots per model (default max sessions)")
    serve.add_argument("--kv-max-len", type=whole_number(2), help="slot pool: positions per slot (default 2048)")
    serve.add_argument(
        "--kv-forward", choices=SLOT_FORWARDS, help="slot pool: its decoder forward (default fused, docs/gpu.md)"
    )
    serve.add_argument(
        "--kv-compile", action="store_true", default=None, help="slot pool: compile its forward with inductor"
    )
    serve.add_argument(
        "--adapters-dir", type=Path, help="federation's global adapter store: serve sessions that declare vN"
    )
    serve.add_argument("--tls-dir", type=Path, help="a `server pki init` directory: its server.pem/key, device-ca.pem")
    serve.add_argument("--cert", type=Path, help="server certificate chain (PEM)")
    serve.add_argument("--key", type=Path, help="server private key (PEM)")
    serve.add_argument("--client-ca", type=Path, help="CA that signs device certificates (PEM)")
    serve.add_argument("--revoke", action="append", metavar="DEVICE", help="refuse this device name (repeatable)")
    serve.add_argument(
        "--max-sessions",
        type=whole_number(),
        help=f"most sessions open at once (default: as many as 75%% of the memory free once the models are "
        f"loaded, the KV budget, holds at the protocol's longest, at most {MAX_SESSIONS}; --kv slots: {MAX_SESSIONS})",
    )
    serve.add_argument(
        "--max-sessions-per-device", type=whole_number(), help="most sessions one device may hold open (default 8)"
    )
    serve.add_argument("--idle-timeout", type=finite_float, help="seconds without an uplink before a session expires")
    serve.add_argument("--open-timeout", type=finite_float, help="seconds a new stream may take to send its Open (10)")
    serve.add_argument(
        "--round-idle-timeout",
        type=number(positive=True),
        help="while another Open waits for a slot, end sessions silent this many seconds since their last verdict (5)",
    )
    serve.add_argument(
        "--queue-timeout",
        type=number(),
        help="seconds an Open that finds the verifier full waits for a slot before refusal (5; 0: refuse at once)",
    )
    serve.add_argument(
        "--slot-min-hold",
        type=number(),
        help="seconds a session keeps its slot before it may be ended, between rounds, for a waiting device (30)",
    )
    serve.add_argument(
        "--max-queued-opens",
        type=whole_number(0),
        help="most Opens waiting for a slot at once (default 2 x max-sessions)",
    )
    serve.add_argument(
        "--reserved-sessions",
        type=whole_number(0),
        help="session slots only devices holding no session may take (default max-sessions / 8)",
    )
    serve.add_argument(
        "--stream-rate", type=number(positive=True), help="streams one device may start per second after its burst (4)"
    )
    serve.add_argument(
        "--stream-burst",
        type=whole_number(1),
        help="streams one device may start at once (default 2 x max-sessions-per-device)",
    )
    serve.add_argument(
        "--handshake-timeout",
        type=number(positive=True),
        help="seconds a connection has for its TLS handshake and first HTTP/2 frame (5)",
    )
    serve.add_argument(
        "--connection-idle-timeout",
        type=number(positive=True),
        help="seconds a connection with no open stream is kept (300)",
    )
    serve.add_argument(
        "--max-connections",
        type=whole_number(),
        help="TCP connections held at once, before TLS; more are closed on accept (8 x max-sessions)",
    )
    serve.add_argument(
        "--max-connections-per-source",
        type=whole_number(1),
        help="connections one source address may hold (unset: no per-source cap; see docs/security.md)",
    )
    serve.add_argument("--max-top-k", type=whole_number(), help="largest steering top-k a device may ask for")
    serve.add_argument(
        "--workers", type=whole_number(), help="threads running sessions' jobs (batching: at least 2 x max-batch)"
    )
    serve.add_argument("--torch-threads", type=whole_number(), help="threads of each torch forward (default: torch's)")
    serve.add_argument(
        "--batching",
        choices=["on", "off"],
        help="merge concurrent sessions' forwards of one model into one padded forward (default on)",
    )
    serve.add_argument("--max-batch", type=whole_number(), help="most sequences in one merged forward (default 8)")
    serve.add_argument(
        "--batch-wait-ms", type=finite_float, help="longest a forward waits for running sessions to join it (default 5)"
    )
    serve.add_argument("--metrics-port", type=whole_number(), help="serve Prometheus metrics on this port (0: any)")
    serve.add_argument("--metrics-host", help="address for the metrics endpoint (default 127.0.0.1)")
    serve.add_argument(
        "--drain-grace",
        type=number(),
        help="on SIGTERM, SIGUSR1 or `server drain`: seconds open sessions get to end before the server exits "
        "(120; a second SIGTERM, or SIGINT, stops at once)",
    )
    serve.add_argument("--transcript-dir", type=Path, help="append each received uplink's sha256, per stream")
    serve.add_argument(
        "--seed",
        type=whole_number(),
        help="seed for sampling-mode draws, for reproducible tests (default: a secret random key; whoever "
        "knows the seed can tell how many sessions were opened before theirs)",
    )
    serve.add_argument(
        "--witness-key", type=Path, help="cosign devices' audit-log checkpoints with this `server witness-key` key"
    )
    serve.add_argument(
        "--witness-state", type=Path, help="the witness's record of what it cosigned (default: beside the key)"
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="what the server logs (default info)",
    )
    add_quiet(serve, "progress log lines (serving on, metrics, stopping, draining)")

    drain = sub.add_parser("drain", help="ask a running `server serve` to drain (refuse new sessions) and exit")
    drain.add_argument("--pid", type=whole_number(1), required=True, help="the serving process's id (SIGUSR1)")
    wk = sub.add_parser("witness-key", help="a key pair for the verifier as its devices' audit-log witness")
    wk.add_argument("--name", required=True, help="the witness's name, e.g. verifier.example.com/witness")
    wk.add_argument("--out", type=Path, required=True, help="directory for NAME.witness.key and NAME.witness.pub")
    pki = sub.add_parser("pki", help="make a working PKI for the verifier and its devices")
    pki_sub = pki.add_subparsers(dest="pki_command", required=True, parser_class=_Parser)
    init = pki_sub.add_parser("init", help="dev CA, server certificate, backup anchor, device CA, pins")
    init.add_argument("--dir", type=Path, required=True, help="a new directory for the PKI")
    init.add_argument("--host", action="append", help="server host name or IP (default: localhost, 127.0.0.1, ::1)")
    issue = pki_sub.add_parser("issue-device", help="a client certificate for one device")
    issue.add_argument("--dir", type=Path, required=True, help="the `server pki init` directory")
    issue.add_argument("--name", required=True, help="the device's name (its certificate's CN; `--revoke` takes it)")
    rotate = pki_sub.add_parser("rotate-server", help="a fresh server certificate; running servers reload it")
    rotate.add_argument("--dir", type=Path, required=True, help="the `server pki init` directory")
    rotate.add_argument(
        "--issuer", default="ca", choices=["ca", "backup-ca"], help="the anchor that signs it (default ca)"
    )
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    tls: dict[str, Path | None] = {"cert": args.cert, "key": args.key, "client_ca": args.client_ca}
    if args.tls_dir is not None:
        defaults = {"cert": "server.pem", "key": "server.key", "client_ca": "device-ca.pem"}
        tls = {k: v if v is not None else args.tls_dir / defaults[k] for k, v in tls.items()}
    return {
        "host": args.host,
        "port": args.port,
        "generalist": args.generalist,
        "specialist": args.specialist,
        "cache_dir": args.cache_dir,
        "quantize": args.quantize,
        "device": args.device,
        "dtype": args.dtype,
        "kv": args.kv,
        "kv_slots": args.kv_slots,
        "kv_max_len": args.kv_max_len,
        "kv_forward": args.kv_forward,
        "kv_compile": args.kv_compile,
        "adapters_dir": args.adapters_dir,
        **tls,
        "revoked_devices": tuple(args.revoke) if args.revoke else None,
        "max_sessions": args.max_sessions,
        "max_sessions_per_device": args.max_sessions_per_device,
        "idle_timeout": args.idle_timeout,
        "open_timeout": args.open_timeout,
        "round_idle_timeout": args.round_idle_timeout,
        "queue_timeout": args.queue_timeout,
        "slot_min_hold": args.slot_min_hold,
        "max_queued_opens": args.max_queued_opens,
        "reserved_sessions": args.reserved_sessions,
        "stream_rate": args.stream_rate,
        "stream_burst": args.stream_burst,
        "handshake_timeout": args.handshake_timeout,
        "connection_idle_timeout": args.connection_idle_timeout,
        "max_connections": args.max_connections,
        "max_connections_per_source": args.max_connections_per_source,
        "max_top_k": args.max_top_k,
        "workers": args.workers,
        "torch_threads": args.torch_threads,
        "batching": None if args.batching is None else args.batching == "on",
        "max_batch": args.max_batch,
        "batch_wait_ms": args.batch_wait_ms,
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
        "drain_grace": args.drain_grace,
        "replica": args.replica,
        "transcript_dir": args.transcript_dir,
        "witness_key": args.witness_key,
        "witness_state": args.witness_state,
        "seed": args.seed,
    }


def _write_port_file(path: Path, port: int) -> None:
    atomic_write(path, f"{port}\n", mode=0o644)  # readers never see a half-written number


def serve(args: argparse.Namespace) -> int:
    from specsteer.server.config import load_config
    from specsteer.server.preflight import check_config

    level = logging.getLevelName(args.log_level.upper())
    # --quiet keeps what a --log-level above it already keeps (error stays error).
    logging.basicConfig(
        level=max(level, logging.WARNING) if args.quiet else level, format=LOG_FORMAT, stream=sys.stderr
    )
    if args.tls_dir is not None and not args.tls_dir.is_dir():
        raise ConfigError(f"the TLS folder {args.tls_dir} does not exist (`server pki init --dir` makes one)")
    config = load_config(args.config, _overrides(args))
    # All that can be refused is, before torch and the models load: server.grpc_server imports them.
    check_config(config)
    from specsteer.server.grpc_server import create_server

    stop, drain = threading.Event(), threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_drain(signum: int, frame: FrameType | None) -> None:
        # A second SIGTERM (or SIGUSR1) while draining stops at once.
        (stop if drain.is_set() else drain).set()

    # Installed before the models load: a SIGTERM then still drains (nothing is open) and exits.
    signal.signal(signal.SIGTERM, on_drain)
    signal.signal(signal.SIGUSR1, on_drain)
    signal.signal(signal.SIGINT, on_stop)
    server, port = create_server(config)
    if server.metrics_port is not None:
        log.info(
            "metrics on http://%s:%d/metrics (probes: /healthz, /readyz)", config.metrics_host, server.metrics_port
        )
    server.start()  # logs "serving on HOST:PORT", once
    if args.port_file is not None:
        _write_port_file(args.port_file, port)
    while not (stop.wait(0.5) or drain.is_set()):
        pass
    if stop.is_set():
        log.info("stopping")
        server.stop(grace=5.0)
    else:
        server.drain_and_stop(server.config.drain_grace, interrupt=stop)
    return 0


def drain_command(args: argparse.Namespace) -> int:
    """Ask a running `server serve` (by its process id) to drain and exit: SIGUSR1."""
    try:
        os.kill(args.pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise ConfigError(f"no process {args.pid} to drain") from None
    except PermissionError:
        raise ConfigError(f"not allowed to signal process {args.pid} (run as its user)") from None
    print(f"server: asked process {args.pid} to drain: it refuses new sessions and exits once the open ones end")
    return 0


def pki_command(args: argparse.Namespace) -> int:
    from specsteer.server import pki

    if args.pki_command == "init":
        p = pki.init_pki(args.dir, hosts=tuple(args.host) if args.host else pki.SERVER_HOSTS)
        print(f"server: PKI in {p.directory}: server.pem/key (serve), device-ca.pem (client CA), pins.txt (devices)")
    elif args.pki_command == "issue-device":
        cert, key = pki.issue_device(args.dir, args.name)
        print(f"server: device {args.name!r}: {cert} and {key}")
    else:
        cert = pki.rotate_server(args.dir, issuer=args.issuer)
        print(f"server: new server certificate in {cert} (issued by {args.issuer})")
    return 0


def witness_key_command(args: argparse.Namespace) -> int:
    from specsteer.audit.cosignature import write_witness_key_pair

    private, public = write_witness_key_pair(args.name, args.out)
    print(f"server: witness signing key {private} (serve --witness-key)\nserver: witness key {public} (for auditors)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # gRPC logs every refused handshake on stderr; keep its errors only (set the variable to override).
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

    def command() -> int:
        try:
            if args.command == "witness-key":
                return witness_key_command(args)
            if args.command == "drain":
                return drain_command(args)
            return serve(args) if args.command == "serve" else pki_command(args)
        except BrokenPipeError:
            raise  # before OSError, which it is: a reader gone away is no error of ours (`reported`)
        except OSError as exc:
            print(f"server: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
            return EXIT_ERROR

    return reported("server", command)


if __name__ == "__main__":
    sys.exit(main())
