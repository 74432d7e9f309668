"""The verifier's configuration: a TOML file, then command-line overrides, then checks.

    [server]
    host = "127.0.0.1"
    port = 50051
    drain_grace = 120.0                   # seconds open sessions get to finish after SIGTERM or SIGUSR1
    # replica = "r0"                      # this verifier's name in a fleet: its transcript's name and header

    [models]
    generalist = "qwen2.5-coder-1.5b-instruct"  # folder, .gguf file or embedded name
    specialist = "qwen2.5-coder-0.5b-instruct"  # the generic copy P_S^0: base weights, no personal adapter
    # cache_dir = "~/.cache/specsteer"
    # device = "cuda"                     # where both cloud models run (default cpu)
    # dtype = "bfloat16"                  # their weights: float32 (default), bfloat16 or float16
    # kv = "slots"                        # sessions' KV in a slot pool (docs/gpu.md; default dynamic)
    # kv_slots = 64                       # ... slots per model (default max_sessions)
    # kv_max_len = 2048                   # ... positions per slot
    # kv_forward = "fused"                # ... its decoder forward: fused (default) or transformers
    # kv_compile = false                  # ... compiled by inductor (a GPU's first forwards compile)

    [tls]                                 # required: the verifier never serves plaintext
    cert = "pki/server.pem"               # relative paths are relative to this file
    key = "pki/server.key"
    client_ca = "pki/device-ca.pem"       # devices must present a certificate it signed
    # revoked_devices = ["lost-phone"]    # device names (certificate CN) refused at once
    # revoked_certificates = "pki/revoked.txt"  # one certificate a line (SHA-256 or serial:HEX), re-read on change

    [limits]
    # max_sessions = 24                   # default: as many as the free memory holds at the longest, at most 64
    max_sessions_per_device = 8
    idle_timeout = 60.0                   # seconds without an uplink before a session expires
    round_idle_timeout = 5.0              # ... or this many while another Open waits for a slot
    open_timeout = 10.0                   # seconds a new stream may take to send its Open
    queue_timeout = 5.0                   # seconds an Open at the cap waits for a slot (0: refuse at once)
    slot_min_hold = 30.0                  # seconds a session keeps its slot before a waiting device may evict it
    # max_queued_opens = 128              # Opens waiting at once (default: 2 x max_sessions)
    # reserved_sessions = 8               # slots only devices with no session may take (default: max_sessions / 8)
    stream_rate = 4.0                     # streams a device may start per second, after ...
    # stream_burst = 16                   # ... a burst of this many (default: 2 x max_sessions_per_device)
    handshake_timeout = 5.0               # seconds for a connection's TLS handshake and first HTTP/2 frame
    connection_idle_timeout = 300.0       # seconds a connection with no stream stays open
    # max_connections = 512               # TCP connections held at once, before any TLS (default: 8 x max_sessions)
    # max_connections_per_source = 64     # ... of them from one address (default: no per-source cap)
    max_top_k = 64
    workers = 1                           # threads running sessions' jobs (with batching: at least 2 * max_batch)
    # torch_threads = 2

    [batching]                            # merge concurrent sessions' forwards of one model (server/batching.py)
    enabled = true                        # false: every forward runs alone, on its session's worker thread
    max_batch = 8                         # most sequences in one merged forward
    max_wait_ms = 5.0                     # longest a forward waits for running sessions to join its batch

    [metrics]
    # port = 9464                         # Prometheus text format on http://host:port/metrics
    host = "127.0.0.1"

    [audit]
    # transcript_dir = "transcripts"      # sha256 of every received uplink, per stream
    # witness_key = "witness/verifier.witness.key"   # cosign devices' audit-log checkpoints (`server witness-key`)
    # witness_state = "witness/witness-state.json"  # what it cosigned, per device log (default: beside the key)

Unknown sections or keys are errors: a typo must not silently fall back to a default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specsteer.audit.transcript import REPLICA_NAME
from specsteer.core.errors import ConfigError, ModelLoadError
from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
from specsteer.core.placement import DEFAULT_DEVICE, DEFAULT_DTYPE, check_placement_names
from specsteer.core.session_types import WIRE_MAX_TOP_K
from specsteer.core.tomlfile import load_dataclass, read_toml
from specsteer.server.pki import DEVICE_NAME

# The slot pool's decoder forwards (server.slot_sequence.SlotPools): its own, fused, or transformers'.
SLOT_FORWARDS = ("fused", "transformers")

__all__ = ["KV_BUDGET_SHARE", "MAX_BATCH", "MAX_SESSIONS", "ServerConfig", "load_config", "max_sessions_for_memory"]

MAX_BATCH = 64  # sequences in one merged forward (bounds its memory)
MAX_SESSIONS = 64  # the default session cap's ceiling: the most a default start admits, whatever the memory
# The share of the memory free once the models are loaded that sessions' dynamic KV caches may
# take together (server.grpc_server.dynamic_kv_budget); the rest is for activations (a long prompt's
# prefill) and the process itself.
KV_BUDGET_SHARE = 0.75
MAX_BATCH_WAIT_MS = 1000.0  # waiting longer than a forward takes would only add latency


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    generalist: str = DEFAULT_GENERALIST
    specialist: str = DEFAULT_SPECIALIST
    cache_dir: Path | None = None
    quantize: str = "fp32"  # both cloud models' Linear layers: "fp32" or "int8" (core.quantize.quantize_linear)
    device: str = DEFAULT_DEVICE  # both cloud models: "cpu", "cuda" or "cuda:N" (core.placement)
    dtype: str = DEFAULT_DTYPE  # ... and their weights' float type
    # The sessions' KV: "dynamic" (a DynamicCache per session and model) or "slots" (the slot pool
    # of server/slot_pool.py: fixed buffers, CUDA-graph replays on a GPU), with its size.
    kv: str = "dynamic"
    kv_slots: int | None = None  # slots per model (default max_sessions)
    kv_max_len: int = 2048  # positions per slot: the longest prompt plus generation it serves
    kv_forward: str = "fused"  # the pool's decoder forward (server.slot_sequence.SlotPools)
    kv_compile: bool = False  # ... compiled by inductor
    # Federation's global adapter store (`<server state>/adapters`): sessions declaring adapter
    # version N are verified with global adapter vN merged into the generic Specialist.
    adapters_dir: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None
    revoked_devices: tuple[str, ...] = field(default=(), metadata={"toml": "a list of device names"})
    revoked_certificates: Path | None = None
    # Unset in the TOML file and on the command line, `load_config` leaves MAX_SESSIONS here and sets
    # `max_sessions_from_memory`: once the models are loaded (dynamic KV), the server lowers it to
    # what the memory holds (`max_sessions_for_memory`). Set, it is taken as given (a warning if the
    # memory cannot hold that many sessions at their longest).
    max_sessions: int = MAX_SESSIONS
    max_sessions_from_memory: bool = field(default=False, repr=False)
    max_sessions_per_device: int = 8
    idle_timeout: float = field(default=60.0, metadata={"toml": "a number of seconds"})
    open_timeout: float = field(default=10.0, metadata={"toml": "a number of seconds"})
    # Fair admission (server/admission.py): the short deadline while others wait, the queue, the reserve.
    round_idle_timeout: float = field(default=5.0, metadata={"toml": "a number of seconds"})
    queue_timeout: float = field(default=5.0, metadata={"toml": "a number of seconds"})
    # A session that has held its slot this long, and is between rounds, is ended for a device with
    # fewer sessions that waits (however often it sends rounds): a trickle cannot keep every slot.
    slot_min_hold: float = field(default=30.0, metadata={"toml": "a number of seconds"})
    max_queued_opens: int | None = None
    reserved_sessions: int | None = None
    stream_rate: float = field(default=4.0, metadata={"toml": "a number of streams per second"})
    stream_burst: int | None = None
    # Before authentication: what gRPC core enforces per connection (server/grpc_server.py).
    handshake_timeout: float = field(default=5.0, metadata={"toml": "a number of seconds"})
    connection_idle_timeout: float = field(default=300.0, metadata={"toml": "a number of seconds"})
    max_connections: int | None = None
    # Set: the public port is server/front.py's accept loop, which holds at most this many
    # connections per source address (unset: gRPC's listener, capped in total only).
    max_connections_per_source: int | None = None
    max_top_k: int = WIRE_MAX_TOP_K
    workers: int = 1
    torch_threads: int | None = None
    batching: bool = True
    max_batch: int = 8
    batch_wait_ms: float = field(default=5.0, metadata={"toml": "a number of milliseconds"})
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    transcript_dir: Path | None = None
    # The witness of devices' audit logs (server/witness.py): its signer key and its state file.
    witness_key: Path | None = None
    witness_state: Path | None = None
    seed: int | None = None
    # Draining (SIGTERM, SIGUSR1, `server drain`): new Opens are refused, open sessions get this long.
    drain_grace: float = field(default=120.0, metadata={"toml": "a number of seconds"})
    # One replica of a fleet behind a proxy (deploy/): its name, written in its transcript's file
    # name and header so that the fleet's replicas share one transcript folder.
    replica: str | None = None
    # Streams beyond the session cap, kept for health checks and for refusing politely.
    extra_streams: int = field(default=16, repr=False)

    @property
    def max_concurrent_rpcs(self) -> int:
        """gRPC's own call limit: a backstop far above what the per-device caps let one device
        hold, so that a flood is refused by the servicer, per device, and never at this gate
        (which would refuse every device alike)."""
        return 16 * (self.max_sessions + self.extra_streams)

    @property
    def connection_cap(self) -> int:
        """TCP connections held at once (gRPC closes any beyond it on accept): 8 per session slot unless
        set, room for idle devices' open channels while bounding what an unauthenticated flood holds."""
        return 8 * self.max_sessions if self.max_connections is None else self.max_connections

    @property
    def queue_length(self) -> int:
        """Most Opens waiting for a slot at once: twice the cap unless set."""
        return 2 * self.max_sessions if self.max_queued_opens is None else self.max_queued_opens

    @property
    def slot_count(self) -> int:
        """Slots per model of the slot pool: one per session the verifier admits unless set."""
        return self.max_sessions if self.kv_slots is None else self.kv_slots

    @property
    def reserve(self) -> int:
        """Slots kept for devices holding no session: an eighth of the cap unless set."""
        return self.max_sessions // 8 if self.reserved_sessions is None else self.reserved_sessions

    @property
    def burst(self) -> int:
        """Streams a device may start at once before `stream_rate` applies: twice its session cap unless set."""
        return 2 * self.max_sessions_per_device if self.stream_burst is None else self.stream_burst

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ConfigError(f"port must be in [0, 65535]; got {self.port}")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"metrics port must be in [0, 65535]; got {self.metrics_port}")
        if self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be at least 1; got {self.max_sessions}")
        if self.max_sessions_per_device < 1:  # above max_sessions it simply never binds
            raise ConfigError(f"max_sessions_per_device must be at least 1; got {self.max_sessions_per_device}")
        if not (math.isfinite(self.idle_timeout) and self.idle_timeout > 0):
            raise ConfigError(f"idle_timeout must be a positive number of seconds; got {self.idle_timeout}")
        if not (math.isfinite(self.open_timeout) and self.open_timeout > 0):
            raise ConfigError(f"open_timeout must be a positive number of seconds; got {self.open_timeout}")
        for name in ("round_idle_timeout", "stream_rate", "handshake_timeout", "connection_idle_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number; got {value}")
        if not (math.isfinite(self.queue_timeout) and self.queue_timeout >= 0):
            raise ConfigError(f"queue_timeout must be a number of seconds, 0 or more; got {self.queue_timeout}")
        for name in ("slot_min_hold", "drain_grace"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a number of seconds, 0 or more; got {value}")
        if self.max_queued_opens is not None and self.max_queued_opens < 0:
            raise ConfigError(f"max_queued_opens must be 0 or more; got {self.max_queued_opens}")
        if self.reserved_sessions is not None and not 0 <= self.reserved_sessions < self.max_sessions:
            raise ConfigError(
                f"reserved_sessions must be in [0, {self.max_sessions - 1}] (below max_sessions); "
                f"got {self.reserved_sessions}"
            )
        if self.max_connections_per_source is not None and self.max_connections_per_source < 1:
            raise ConfigError(f"max_connections_per_source must be at least 1; got {self.max_connections_per_source}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1; got {self.max_connections}")
        if self.stream_burst is not None and self.stream_burst < 1:
            raise ConfigError(f"stream_burst must be at least 1; got {self.stream_burst}")
        for name in self.revoked_devices:
            # A revocation that can match no device would leave the device it meant connected.
            if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
                raise ConfigError(
                    f"revoked device {name!r} is not a device name (1-63 lowercase letters, digits or '-', not "
                    "first: the CN its certificate was issued with), so it would revoke nothing"
                )
        if not 1 <= self.max_top_k <= WIRE_MAX_TOP_K:
            raise ConfigError(f"max_top_k must be in [1, {WIRE_MAX_TOP_K}]; got {self.max_top_k}")
        if self.workers < 1:
            raise ConfigError(f"workers must be at least 1; got {self.workers}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError(f"torch_threads must be at least 1; got {self.torch_threads}")
        if self.quantize not in ("fp32", "int8"):
            raise ConfigError(f"quantize must be fp32 or int8; got {self.quantize!r}")
        # Before the minutes of loading, and before torch is imported: a dtype or device no kernel
        # serves (whether a CUDA device is there is server.preflight.check_config's, last).
        try:
            check_placement_names(self.device, self.dtype, self.quantize)
        except ModelLoadError as exc:
            raise ConfigError(str(exc)) from None
        if self.kv not in ("dynamic", "slots"):
            raise ConfigError(f"kv must be dynamic or slots; got {self.kv!r}")
        if self.kv_slots is not None and self.kv_slots < 1:
            raise ConfigError(f"kv_slots must be at least 1; got {self.kv_slots}")
        if self.kv_max_len < 2:
            raise ConfigError(f"kv_max_len must be at least 2; got {self.kv_max_len}")
        if self.kv_forward not in SLOT_FORWARDS:
            raise ConfigError(f"kv_forward must be {' or '.join(SLOT_FORWARDS)}; got {self.kv_forward!r}")
        if not isinstance(self.kv_compile, bool):
            raise ConfigError(f"kv_compile must be true or false; got {self.kv_compile!r}")
        if not isinstance(self.batching, bool):
            raise ConfigError(f"batching must be on or off (true or false); got {self.batching!r}")
        if not 1 <= self.max_batch <= MAX_BATCH:
            raise ConfigError(f"max_batch must be in [1, {MAX_BATCH}]; got {self.max_batch}")
        if not (math.isfinite(self.batch_wait_ms) and 0 <= self.batch_wait_ms <= MAX_BATCH_WAIT_MS):
            raise ConfigError(
                f"batch max_wait_ms must be a number of milliseconds in [0, {MAX_BATCH_WAIT_MS:g}]; "
                f"got {self.batch_wait_ms}"
            )
        if self.replica is not None and not (isinstance(self.replica, str) and REPLICA_NAME.fullmatch(self.replica)):
            raise ConfigError(
                f"replica must be 1-64 letters, digits, '_' or '-' (first a letter or digit); got {self.replica!r}"
            )
        if self.witness_state is not None and self.witness_key is None:
            raise ConfigError("witness_state needs witness_key: a witness's state is only kept by the witness")

    def require_tls(self) -> tuple[Path, Path, Path]:
        """The certificate, key and client CA; the verifier does not start without all three."""
        missing = [name for name in ("cert", "key", "client_ca") if getattr(self, name) is None]
        if missing:
            raise ConfigError(
                f"TLS is required: set {', '.join(missing)} (in [tls] or with --{missing[0].replace('_', '-')})"
            )
        assert self.cert is not None and self.key is not None and self.client_ca is not None
        return self.cert, self.key, self.client_ca


# Where each TOML key lives: section -> {key in the file: field of ServerConfig}.
_LAYOUT: dict[str, dict[str, str]] = {
    "server": {"host": "host", "port": "port", "seed": "seed", "drain_grace": "drain_grace", "replica": "replica"},
    "models": {
        "generalist": "generalist",
        "specialist": "specialist",
        "cache_dir": "cache_dir",
        "adapters_dir": "adapters_dir",
        "quantize": "quantize",
        "device": "device",
        "dtype": "dtype",
        "kv": "kv",
        "kv_slots": "kv_slots",
        "kv_max_len": "kv_max_len",
        "kv_forward": "kv_forward",
        "kv_compile": "kv_compile",
    },
    "tls": {
        "cert": "cert",
        "key": "key",
        "client_ca": "client_ca",
        "revoked_devices": "revoked_devices",
        "revoked_certificates": "revoked_certificates",
    },
    "limits": {
        "max_sessions": "max_sessions",
        "max_sessions_per_device": "max_sessions_per_device",
        "idle_timeout": "idle_timeout",
        "open_timeout": "open_timeout",
        "round_idle_timeout": "round_idle_timeout",
        "queue_timeout": "queue_timeout",
        "slot_min_hold": "slot_min_hold",
        "max_queued_opens": "max_queued_opens",
        "reserved_sessions": "reserved_sessions",
        "stream_rate": "stream_rate",
        "stream_burst": "stream_burst",
        "handshake_timeout": "handshake_timeout",
        "connection_idle_timeout": "connection_idle_timeout",
        "max_connections": "max_connections",
        "max_connections_per_source": "max_connections_per_source",
        "max_top_k": "max_top_k",
        "workers": "workers",
        "torch_threads": "torch_threads",
    },
    "batching": {"enabled": "batching", "max_batch": "max_batch", "max_wait_ms": "batch_wait_ms"},
    "metrics": {"port": "metrics_port", "host": "metrics_host"},
    "audit": {"transcript_dir": "transcript_dir", "witness_key": "witness_key", "witness_state": "witness_state"},
}


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> ServerConfig:
    """Read `path` (TOML) if given, apply `overrides` (field name -> value; None means unset).

    A `max_sessions` set in neither is to be derived from memory (`max_sessions_from_memory`)."""
    config = load_dataclass(ServerConfig, path, _LAYOUT, overrides)
    in_file = path is not None and "max_sessions" in read_toml(Path(path)).get("limits", {})
    if (overrides or {}).get("max_sessions") is None and not in_file:
        config = replace(config, max_sessions_from_memory=True)
    return config


def max_sessions_for_memory(
    free_bytes: int | None, per_session_bytes: int, *, at_least: int = 1, share: float = KV_BUDGET_SHARE
) -> int:
    """The default session cap: as many sessions as `share` of the memory free once the models are
    loaded (the dynamic KV budget) holds, each at the protocol's longest (`per_session_bytes` of KV
    cache), between `at_least` and MAX_SESSIONS. Memory that cannot be read (`free_bytes` None):
    MAX_SESSIONS. So a default start never admits more sessions than their caches can grow to.

    E.g. 20 GiB free and 640 MiB a session: 15 GiB of budget, 24 sessions."""
    if free_bytes is None or per_session_bytes <= 0:
        return MAX_SESSIONS
    fits = int(free_bytes * share) // per_session_bytes
    return max(at_least, min(MAX_SESSIONS, fits))
