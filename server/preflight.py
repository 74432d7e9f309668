"""Everything `server serve` can refuse before a model library is imported.

Importing torch and transformers takes seconds of CPU and hundreds of MB; loading real models,
minutes. A configuration that cannot serve (a TLS folder that is not there, a port in use, a
witness key that cannot be read, an open-file limit below the connection cap) is refused here, in
one sentence (`ConfigError`), before any of that. This module imports neither torch, transformers
nor grpc (`tests/server/test_serve_fails_fast.py` holds it to that), and `server.cli` runs
`check_config` before it imports `server.grpc_server`.

What needs the models themselves (their KV bytes a position, the memory left once their weights
are in) is `server.grpc_server`'s, after the load: the default `max_sessions` derived from memory
(`server.config.max_sessions_for_memory`) and the warning for an explicit one that outgrows it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from specsteer.core.errors import ConfigError, ModelLoadError
from specsteer.core.placement import check_placement
from specsteer.core.tls_identity import check_client_cas, check_tls_identity, read_tls_file
from specsteer.server.config import ServerConfig

__all__ = ["TlsMaterial", "check_before_loading", "check_config", "fd_headroom", "read_tls_material"]


@dataclass(frozen=True)
class TlsMaterial:
    """The verifier's TLS files, read and checked: its chain and key, and the device CAs."""

    chain_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    client_cas: tuple[x509.Certificate, ...]  # the device CAs: the only anchors of a device's path


def read_tls_material(cert: Path, key: Path, client_ca: Path) -> TlsMaterial:
    """Read the certificate chain, key and client CA; refuse (`ConfigError`) files that cannot serve:
    unreadable, not PEM, a key that is not the certificate's, a certificate expired or not the
    verifier's, a client-CA file holding a certificate that is no CA's."""
    chain_pem, key_pem = read_tls_file(cert, "certificate"), read_tls_file(key, "key")
    ca_pem = read_tls_file(client_ca, "trust")
    check_tls_identity(chain_pem, key_pem, cert_path=cert, key_path=key, role="server")
    try:
        client_cas = x509.load_pem_x509_certificates(ca_pem)
    except ValueError:
        raise ConfigError(f"{client_ca} holds no PEM certificate that can be read") from None
    check_client_cas(client_cas, path=client_ca)
    return TlsMaterial(chain_pem, key_pem, ca_pem, tuple(client_cas))


_FD_SPARE = 256  # descriptors beside the devices' connections: model files, transcript, metrics, logs


def fd_headroom(config: ServerConfig) -> int:
    """Raise the open-file limit to its hard maximum; refuse to start if the caps cannot fit under it.

    Every connection is a descriptor, so with fewer than the connection cap (plus the server's own)
    a flood would exhaust them before gRPC's cap closes the excess. Returns the limit. With
    `max_sessions` to be derived from memory the cap checked is the one of its ceiling (64
    sessions), which the derived one never exceeds.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # e.g. an unlimited hard limit the kernel will not grant: keep the soft one
    # Behind the front (server/front.py) a connection holds three: the device's, the front's to
    # gRPC, and gRPC's end of it.
    per_connection = 1 if config.max_connections_per_source is None else 3
    need = per_connection * config.connection_cap + _FD_SPARE
    if soft != resource.RLIM_INFINITY and soft < need:
        raise ConfigError(
            f"the open-file limit is {soft}, below the {need} descriptors {config.connection_cap} connections need "
            f"({per_connection} per connection plus the server's own): raise it (ulimit -n) or lower max_connections"
        )
    return soft


def check_before_loading(config: ServerConfig) -> None:
    """Refuse (`ConfigError`) what would only fail after the models load, minutes in with real ones:
    a port in use or an address this host does not have (the service's and the metrics'), a global
    adapters folder that is not there, and a transcript folder that cannot be written or that other
    users may write in."""
    listen = [(config.host, config.port, "the service")]
    if config.metrics_port is not None:
        listen.append((config.metrics_host, config.metrics_port, "the metrics"))
    for host, port, what in listen:
        if port == 0:
            continue  # any free port: nothing to collide with
        name = host.strip("[]")
        try:
            with socket.socket(socket.AF_INET6 if ":" in name else socket.AF_INET, socket.SOCK_STREAM) as probe:
                # As gRPC's and the metrics' listeners bind: a port whose last connections linger
                # in TIME_WAIT (a replica restarted on its port) is free; one another socket
                # listens on is still refused.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((name, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port} for {what}: {exc.strerror or exc}") from None
    if config.adapters_dir is not None and not config.adapters_dir.is_dir():
        # Else every session declaring a global adapter would be refused, and the cause never said.
        raise ConfigError(f"the global adapters folder {config.adapters_dir} does not exist or is no folder")
    if config.transcript_dir is not None:
        try:
            config.transcript_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create transcript directory {config.transcript_dir}: {exc.strerror}") from None
        if not os.access(config.transcript_dir, os.W_OK | os.X_OK):
            raise ConfigError(f"cannot write in transcript directory {config.transcript_dir}")
        from specsteer.audit.errors import AuditError
        from specsteer.audit.transcript import check_folder

        try:
            check_folder(config.transcript_dir)  # one that others may write in would let them rewrite it
        except AuditError as exc:
            raise ConfigError(str(exc)) from None


def check_config(config: ServerConfig) -> None:
    """All of `config` that can be checked before the models load, cheapest first; `ConfigError`.

    The TLS files (readable, valid, the key the certificate's), the open-file limit against the
    connection cap, the ports (bindable now) and folders (`check_before_loading`), the witness key;
    last, where the models go: only a CUDA device imports torch here (whether this machine has
    that GPU is torch's to say). The port range and every limit's own range were checked when
    `config` was built (`ServerConfig.__post_init__`), as was the TOML file.
    """
    read_tls_material(*config.require_tls())
    fd_headroom(config)
    check_before_loading(config)
    if config.witness_key is not None:
        from specsteer.server.witness import load_witness

        load_witness(config.witness_key, config.witness_state)
    if config.device.startswith("cuda"):
        try:
            check_placement(config.device, config.dtype, config.quantize)
        except ModelLoadError as exc:
            raise ConfigError(str(exc)) from None
