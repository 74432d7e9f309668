"""Build, then serve: the verifier as a gRPC server over mutually authenticated TLS.

    server, port = create_server(config)          # loads the models once, binds (port 0: any)
    server.start()
    ...
    server.stop()

The server runs on its own asyncio event loop thread, so tests, the demo and the CLI embed it the
same way. It serves `specsteer.v1.Verifier` (`server/service.py`) and the standard gRPC health
check (to devices it would serve, `Check` only: `DeviceHealth`), exposes Prometheus metrics and
the orchestrator's probes if asked (`/healthz`, `/readyz`: `server.metrics`), drains (`drain`,
`drain_and_stop`: new Opens refused, open sessions let end), and re-reads its certificate, key
and client CA whenever the files change (`CertificateSource`): rotation needs no restart, and a
broken new file is refused (the current certificate stays) rather than taking the server down.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from cryptography import x509
from grpc_health.v1 import health, health_pb2

from specsteer.core import wire
from specsteer.core.errors import ConfigError
from specsteer.core.limits import MAX_DOWNLINK_BYTES, MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, MAX_UPLINK_BYTES
from specsteer.core.models import CausalLM
from specsteer.core.session_types import MAX_CANDIDATE_TOKENS
from specsteer.server.batching import Scheduler
from specsteer.server.config import KV_BUDGET_SHARE, ServerConfig, max_sessions_for_memory
from specsteer.server.front import ConnectionFront
from specsteer.server.kv_budget import KvBudget
from specsteer.server.metrics import Metrics
from specsteer.server.preflight import check_before_loading, fd_headroom, read_tls_material
from specsteer.server.service import TranscriptSink, VerifierService
from specsteer.server.session import CloudVerifier
from specsteer.server.slot_pool import available_bytes, kv_bytes
from specsteer.server.slot_sequence import SlotPools

if TYPE_CHECKING:  # for an annotation only
    from transformers import PreTrainedModel

__all__ = [
    "CertificateSource",
    "VerifierServer",
    "build_cloud",
    "check_before_loading",
    "connection_limits",
    "create_server",
    "fd_headroom",
    "size_sessions_to_memory",
]

log = logging.getLogger("server")


@dataclass(frozen=True)
class _Files:
    signature: tuple[tuple[int, int, int], ...]
    config: grpc.ServerCertificateConfiguration
    client_cas: tuple[x509.Certificate, ...]  # the device CAs: the only anchors of a device's path


class CertificateSource:
    """The server's TLS material, checked on load and reloaded when any of the files changes."""

    def __init__(self, cert: Path, key: Path, client_ca: Path, metrics: Metrics | None = None) -> None:
        self.paths = (Path(cert), Path(key), Path(client_ca))
        self.metrics = metrics
        self._lock = threading.Lock()
        self._current = self._load()
        self._refused: tuple[tuple[int, int, int], ...] | None = None

    def _signature(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self.paths:
            st = path.stat()
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def _load(self) -> _Files:
        cert_path, key_path, ca_path = self.paths
        try:
            signature = self._signature()
        except OSError as exc:
            raise ConfigError(f"cannot read TLS file {exc.filename}: {exc.strerror}") from None
        tls = read_tls_material(cert_path, key_path, ca_path)
        config = grpc.ssl_server_certificate_configuration([(tls.key_pem, tls.chain_pem)], root_certificates=tls.ca_pem)
        return _Files(signature, config, tls.client_cas)

    @property
    def initial(self) -> grpc.ServerCertificateConfiguration:
        return self._current.config

    @property
    def device_cas(self) -> tuple[x509.Certificate, ...]:
        """The device CAs gRPC trusts now (reloaded with the files), for `server.device_identity`."""
        return self._current.client_cas

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC calls this before each handshake: a new configuration if the files changed, else None."""
        with self._lock:
            try:
                signature = self._signature()
            except OSError:
                return None  # mid-rename: keep serving the current certificate
            if signature in (self._current.signature, self._refused):
                return None
            try:
                self._current = self._load()
            except ConfigError as exc:
                # Half-written or mismatched files (e.g. the key renamed in before its certificate):
                # keep the current material and try again when the files change once more.
                self._refused = signature
                log.warning("TLS files changed but were refused, keeping the current certificate: %s", exc)
                if self.metrics is not None:
                    self.metrics.cert_reloads.labels("refused").inc()
                return None
            log.info("TLS certificate reloaded from %s", self.paths[0])
            if self.metrics is not None:
                self.metrics.cert_reloads.labels("ok").inc()
            return self._current.config


def build_cloud(config: ServerConfig) -> CloudVerifier:
    """Load the Generalist and the generic Specialist copy once, as the config names them."""
    import torch

    from specsteer.core.models import load_causal_lm

    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)

    def load(name: str) -> CausalLM:  # both models on the same cache, quantization, device and dtype
        return load_causal_lm(
            name, cache_dir=config.cache_dir, quantize=config.quantize, device=config.device, dtype=config.dtype
        )

    log.info("loading Generalist %s", config.generalist)
    generalist = load(config.generalist)
    log.info("loading generic Specialist copy %s", config.specialist)
    specialist = load(config.specialist)
    kv_slots = (
        SlotPools(config.slot_count, config.kv_max_len, forward=config.kv_forward, compiled=config.kv_compile)
        if config.kv == "slots"
        else None
    )
    adapters = (
        None
        if config.adapters_dir is None
        else GlobalAdapters(specialist, config.adapters_dir, evicted=None if kv_slots is None else kv_slots.drop)
    )
    try:
        verifier = CloudVerifier(
            generalist,
            specialist,
            max_top_k=config.max_top_k,
            seed=config.seed,
            global_adapters=adapters,
            kv_slots=kv_slots,
            kv_budget=None if kv_slots is not None else dynamic_kv_budget(generalist),
        )
    except ValueError as exc:  # the slot pool cannot serve this pair
        raise ConfigError(f"--kv slots: {exc}.") from None
    if kv_slots is not None:  # on a GPU: every graph captured, every compile done, before the first session
        started = time.perf_counter()
        shapes = kv_slots.warm_up([generalist.model, specialist.model])
        if shapes:
            log.info("slot pools warmed up: %d forward shapes in %.1f s", shapes, time.perf_counter() - started)
    return verifier


class GlobalAdapters:
    """The federated global adapters under `adapters_dir` (federation's store), merged into the
    generic Specialist on first use. Only the newest `keep` versions in the store are served, and
    each stays merged: a device cycling through old versions would otherwise make every Open
    re-merge the Specialist (seconds of work under this lock, holding up every other Open). An
    older version is refused with a sentence naming the ones served. `evicted(model)`, if given,
    is told of each merged copy let go (the slot pools drop theirs: `SlotPools.drop`)."""

    def __init__(
        self,
        base: CausalLM,
        adapters_dir: Path,
        keep: int = 2,
        *,
        evicted: Callable[[PreTrainedModel], None] | None = None,
    ) -> None:
        self.base = base
        self.adapters_dir = adapters_dir
        self.keep = keep
        self.evicted = evicted
        self._loaded: dict[int, CausalLM] = {}
        self._lock = threading.Lock()

    def __call__(self, version: int) -> CausalLM:
        from specsteer.core.adapter_files import adapter_versions
        from specsteer.core.adapters import apply_adapters, load_global_adapter
        from specsteer.core.errors import AdapterError

        with self._lock:
            if version in self._loaded:
                return self._loaded[version]
            served = adapter_versions(self.adapters_dir)[-self.keep :]
            if served and version < served[0]:
                raise AdapterError(
                    f"global adapter v{version} is retired: this verifier serves v{served[0]}..v{served[-1]}; "
                    "the device should fetch the newest"
                )
            folder = load_global_adapter(version, self.adapters_dir)
            self._loaded[version] = apply_adapters(self.base, folder.path, None, expect_version=version)
            while len(self._loaded) > self.keep:
                dropped = self._loaded.pop(min(self._loaded))  # the oldest version, not the first merged
                if self.evicted is not None:
                    self.evicted(dropped.model)
            return self._loaded[version]


def _open_transcript(directory: Path, replica: str | None) -> TranscriptSink:
    # The audit package owns the transcript format that `audit verify --server-transcript` reads.
    from specsteer.audit.errors import AuditError
    from specsteer.audit.transcript import ServerTranscript, transcript_name

    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create transcript directory {directory}: {exc.strerror}") from None
    try:
        return ServerTranscript.open(directory / transcript_name(replica), replica=replica)
    except AuditError as exc:  # a folder others may write in, or a file that is no transcript
        raise ConfigError(str(exc)) from None


# Keepalive: the server pings a connection silent this long and drops it if no answer comes within
# the timeout, so a peer that vanished without a FIN (a phone off the network) frees its streams.
_KEEPALIVE_MS = 60_000
_KEEPALIVE_TIMEOUT_MS = 20_000
# No connection lives longer than this; its streams then get the grace to finish (a session lasts
# seconds to minutes), and the device's channel reconnects for the next one.
_MAX_CONNECTION_AGE_MS = 2 * 3600 * 1000
_MAX_CONNECTION_AGE_GRACE_MS = 10 * 60 * 1000


def connection_limits(config: ServerConfig) -> list[tuple[str, int]]:
    """What gRPC core enforces per connection, before and after authentication.

    gRPC core caps the connections held at once (in total: one beyond the cap is closed as soon
    as it is accepted, so a flood cannot exhaust the descriptors); a cap per source address belongs
    to a fronting proxy or the firewall (docs/security.md). It also bounds how long each connection
    may take and hold.
    """
    return [
        ("grpc.max_allowed_incoming_connections", config.connection_cap),
        # One deadline for the TCP accept to the TLS handshake's end and the client's first
        # HTTP/2 SETTINGS frame: a connection that never speaks is closed after it (gRPC: 120 s).
        ("grpc.server_handshake_timeout_ms", round(config.handshake_timeout * 1000)),
        # A connection with no stream for this long is closed (a GOAWAY; clients reconnect).
        ("grpc.max_connection_idle_ms", round(config.connection_idle_timeout * 1000)),
        ("grpc.max_connection_age_ms", _MAX_CONNECTION_AGE_MS),
        ("grpc.max_connection_age_grace_ms", _MAX_CONNECTION_AGE_GRACE_MS),
        ("grpc.keepalive_time_ms", _KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", _KEEPALIVE_TIMEOUT_MS),
        # A client may not ping an idle connection more than once a minute (gRPC's default is
        # 5 minutes, with the connection closed after two strikes): pings cost the server work.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 60_000),
        ("grpc.http2.max_ping_strikes", 2),
        # Streams on one connection: one device's stream cap, plus room for its health checks.
        # More is refused by the servicer anyway; here they queue on the client, not in server memory.
        ("grpc.max_concurrent_streams", config.max_sessions_per_device + config.extra_streams),
    ]


_HEALTH_SERVICE = "grpc.health.v1.Health"
_HEALTH_CHECKS_PER_DEVICE = 4  # a device's health checks in flight at once
_HEALTH_REQUEST_TIMEOUT = 5.0  # seconds from a Check's start to its request


class DeviceHealth(health.aio.HealthServicer):
    """gRPC's standard health service, answered to devices the verifier would serve, Check only.

    Watch and List are not served: Watch streams outlive any check, and a device (a revoked one
    included) could hold them open by the thousand, under every per-device cap, until gRPC's
    shared call limit refused every other device's session. Check is served as a call whose
    handler starts with the call, not with its request: as a unary method gRPC ran the handler
    (and so the device check) only once the request came, so calls whose request never came held
    the shared limit just as well. Each device has at most four checks in flight, and a request
    must come within five seconds.
    """

    def __init__(self, refuse_unless_device: Callable[[grpc.aio.ServicerContext], Awaitable[str]]) -> None:
        super().__init__()
        self._refuse_unless_device = refuse_unless_device
        self._in_flight: Counter[str] = Counter()

    def handler(self) -> grpc.GenericRpcHandler:
        # Without (de)serializers a handler takes and gives raw bytes.
        refused: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(self._not_served)
        check = grpc.stream_unary_rpc_method_handler(
            self._check,
            request_deserializer=health_pb2.HealthCheckRequest.FromString,
            response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
        )
        watch: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_stream_rpc_method_handler(self._not_served_stream)
        return grpc.method_handlers_generic_handler(_HEALTH_SERVICE, {"Check": check, "Watch": watch, "List": refused})

    async def _check(self, requests: Any, context: grpc.aio.ServicerContext) -> Any:
        name = await self._refuse_unless_device(context)
        if self._in_flight[name] >= _HEALTH_CHECKS_PER_DEVICE:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"device {name!r} already has {_HEALTH_CHECKS_PER_DEVICE} health checks in flight",
            )
        self._in_flight[name] += 1
        try:
            try:
                request = await asyncio.wait_for(requests.__anext__(), _HEALTH_REQUEST_TIMEOUT)
            except (TimeoutError, StopAsyncIteration):
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no health check request came")
            return await super().Check(request, context)
        finally:
            self._in_flight[name] -= 1
            if not self._in_flight[name]:
                del self._in_flight[name]

    async def _not_served(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this verifier answers the health Check only")

    async def _not_served_stream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this verifier answers the health Check only")
        yield  # an async generator, as a streaming handler must be


class VerifierServer:
    """A bound (not yet started) verifier; `start`, `stop`, `wait`. Thread-safe."""

    def __init__(
        self,
        config: ServerConfig,
        cloud: CloudVerifier,
        *,
        transcript: TranscriptSink | None = None,
        certificates: CertificateSource | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.cloud = cloud
        # `create_server` may have served the metrics port (its /healthz) while the models loaded.
        self.metrics = metrics or Metrics()
        self._serving = False
        self.draining = False
        self.metrics.ready = lambda: self.ready
        self.certificates = certificates or CertificateSource(*config.require_tls())
        self.certificates.metrics = self.metrics
        self.transcript = transcript
        if transcript is None and config.transcript_dir is not None:
            self.transcript = _open_transcript(config.transcript_dir, config.replica)
        self.scheduler = Scheduler(
            config.workers,
            self.metrics,
            batching=config.batching,
            max_batch=config.max_batch,
            max_wait=config.batch_wait_ms / 1000,
        )
        self.port = 0
        self.metrics_port: int | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="verifier-loop", daemon=True)
        self._thread.start()
        self._stopped = threading.Event()
        self._server: grpc.aio.Server | None = None
        self.front: ConnectionFront | None = None  # the per-source cap's accept loop, when configured
        self._health: Any = None
        self.service: VerifierService | None = None
        try:
            self._call(self._bind())
        except BaseException:
            self.scheduler.shutdown()
            self._shutdown_loop()
            raise

    def _call(self, coro: Any, timeout: float | None = 60.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    async def _bind(self) -> None:
        config = self.config
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_UPLINK_BYTES),
                # A fusion session's dense downlink is bounded by the Specialist's vocabulary.
                (
                    "grpc.max_send_message_length",
                    max(MAX_DOWNLINK_BYTES, wire.fusion_downlink_bytes(self.cloud.specialist.vocab_size)),
                ),
                # Without this a second process could bind the same port and take half the devices.
                ("grpc.so_reuseport", 0),
                # Identity only: gRPC would inflate a compressed uplink before the servicer, so the
                # transcript would hash other bytes than arrived (and a small frame could inflate to
                # the message cap). A compressed message is refused by gRPC itself.
                ("grpc.compression_enabled_algorithms_bitset", 1),
                *connection_limits(config),
            ],
            maximum_concurrent_rpcs=config.max_concurrent_rpcs,
            compression=grpc.Compression.NoCompression,
        )
        certificates = self.certificates
        self.service = VerifierService(
            self.cloud,
            config,
            self.metrics,
            self.scheduler,
            self.transcript,
            device_cas=lambda: certificates.device_cas,
        )
        server.add_generic_rpc_handlers((self.service.handler(),))
        self._health = DeviceHealth(self.service.refuse_unless_device)
        server.add_generic_rpc_handlers((self._health.handler(),))
        credentials = grpc.dynamic_ssl_server_credentials(
            self.certificates.initial,
            # grpc's stubs leave out that the fetcher may return None ("no change"), as gRPC documents.
            self.certificates.fetch,  # type: ignore[arg-type]
            require_client_authentication=True,
        )
        per_source = config.max_connections_per_source
        host = config.host.strip("[]")  # "::1" and "[::1]" name one address; gRPC wants the brackets
        address = (f"[{host}]" if ":" in host else host) + f":{config.port}"
        if per_source is not None:
            # Behind the front, gRPC listens where only the front can reach it: a Unix socket in a
            # directory of its own (0700), not a loopback port any local process could fill.
            try:
                self.front = ConnectionFront(
                    per_source=per_source,
                    total=config.connection_cap,
                    handshake_timeout=config.handshake_timeout,
                    metrics=self.metrics,
                )
            except OSError as exc:
                raise ConfigError(f"cannot make the front's private socket directory: {exc}") from None
        try:
            if self.front is not None:
                try:
                    server.add_secure_port(f"unix:{self.front.backend}", credentials)
                    self.front.restrict_backend()
                except (RuntimeError, OSError) as exc:
                    raise ConfigError(f"cannot listen on unix:{self.front.backend}: {exc}") from None
                self._server = server
                try:
                    self.port = await self.front.bind(host, config.port)
                except OSError as exc:
                    raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc}") from None
            else:
                try:
                    self.port = server.add_secure_port(address, credentials)
                except RuntimeError as exc:
                    raise ConfigError(f"cannot listen on {address}: {exc}") from None
                self._server = server
        except BaseException:
            if self.front is not None:
                self.front.close()
            raise

    async def _start(self) -> None:
        assert self._server is not None
        await self._server.start()
        if self.front is not None:
            await self.front.start()
        for name in ("", wire.SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def start(self) -> None:
        self._call(self._start())
        if self.config.metrics_port is not None and self.metrics_port is None:
            self.metrics_port = self.metrics.serve(self.config.metrics_host, self.config.metrics_port)
        self._serving = True
        named = "" if self.config.replica is None else f" as replica {self.config.replica}"
        log.info("serving on %s:%d (mutual TLS)%s", self.config.host, self.port, named)

    @property
    def ready(self) -> bool:
        """Whether this replica would admit a session now (the metrics port's /readyz): its models
        are loaded, it serves, and it is not draining."""
        return self._serving and not self.draining and not self._stopped.is_set()

    @property
    def open_sessions(self) -> int:
        return 0 if self.service is None else self.service.open_sessions

    async def _drain(self) -> None:
        assert self.service is not None
        self.service.drain()
        if self._health is not None:
            for name in ("", wire.SERVICE_NAME):
                await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    def drain(self) -> None:
        """Stop admitting, for good: /readyz answers 503, every new (or queued) Open is refused with
        UNAVAILABLE "draining" (the device finishes locally or opens elsewhere), the health check
        says NOT_SERVING; open sessions go on. Thread-safe; a second call does nothing."""
        if self.draining or self._stopped.is_set():
            return
        self.draining = True
        self._call(self._drain())

    def drain_and_stop(self, grace: float, interrupt: threading.Event | None = None) -> bool:
        """`drain`, let the open sessions end within `grace` seconds (or until `interrupt` is set),
        then `stop`; True if every session ended before the grace ran out."""
        self.drain()
        log.info("draining: new sessions are refused; %d open get up to %g s to end", self.open_sessions, grace)
        interrupt = interrupt or threading.Event()
        deadline = time.monotonic() + grace
        while self.open_sessions and not interrupt.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            interrupt.wait(min(0.1, left))
        drained = not self.open_sessions
        if drained:
            log.info("drained: every session ended")
        else:
            log.warning("drain ended with %d session(s) still open: they are cut", self.open_sessions)
        # Streams whose sessions closed may still be sending their last answer (a cosignature).
        self.stop(grace=1.0 if drained else 0)
        return drained

    async def _stop(self, grace: float | None) -> None:
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)
        if self.front is not None:
            await self.front.stop()

    def stop(self, grace: float | None = 1.0) -> None:
        """Stop serving (open streams get `grace` seconds), then release the port and threads."""
        if self._stopped.is_set():
            return
        self._serving = False
        try:
            self._call(self._stop(grace), timeout=None if grace is None else grace + 30.0)
        finally:
            self.scheduler.shutdown()
            self.metrics.stop()
            close = getattr(self.transcript, "close", None)
            if callable(close):
                close()
            self._shutdown_loop()
            self._stopped.set()

    def _shutdown_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (True) or `timeout` passes (False)."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> VerifierServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=0)


def create_server(
    config: ServerConfig, *, cloud: CloudVerifier | None = None, transcript: TranscriptSink | None = None
) -> tuple[VerifierServer, int]:
    """Load the models (unless `cloud` is given), bind the port; return the server and its port.

    The TLS files are checked first, so a bad certificate fails in a second, not after the models
    load (`server serve` checks all it can before it even imports this module: `server.preflight`).
    With dynamic KV, a `max_sessions` left to be derived (`config.max_sessions_from_memory`) is
    lowered to what the memory holds once the models are in (`size_sessions_to_memory`).
    """
    certificates = CertificateSource(*config.require_tls())
    fd_headroom(config)
    check_before_loading(config)
    metrics = Metrics()
    metrics_port = None
    if config.metrics_port is not None:
        # Up before the models load (minutes, with real ones): /healthz says the process is alive,
        # /readyz says 503 until the server serves.
        metrics_port = metrics.serve(config.metrics_host, config.metrics_port)
    try:
        if cloud is None:
            cloud = build_cloud(config)
        if config.kv == "dynamic":
            if config.max_sessions_from_memory:
                config = size_sessions_to_memory(config, cloud)
            warn_if_sessions_outgrow_memory(config, cloud)
        server = VerifierServer(config, cloud, transcript=transcript, certificates=certificates, metrics=metrics)
    except BaseException:
        metrics.stop()
        raise
    server.metrics_port = metrics_port
    return server, server.port


def dynamic_kv_budget(generalist: CausalLM) -> KvBudget | None:
    """The budget of every session's dynamic KV cache (`server.kv_budget`), from the memory free on
    the models' device now; None where that cannot be read (no bound, as before)."""
    free = available_bytes(generalist.model.device)
    if free is None:
        log.warning("free memory cannot be read here: sessions' KV caches are not bounded")
        return None
    budget = KvBudget(max(1, int(free * KV_BUDGET_SHARE)))
    log.info(
        "sessions' KV caches may take %.1f GiB together (%.0f%% of the free memory)",
        budget.limit / 2**30,
        KV_BUDGET_SHARE * 100,
    )
    return budget


# A session at the protocol's longest: the longest prompt, every new token, one candidate block.
LONGEST_SESSION = MAX_PROMPT_TOKENS + MAX_NEW_TOKENS + MAX_CANDIDATE_TOKENS


def session_kv_bytes(cloud: CloudVerifier) -> int:
    """KV bytes one session at the protocol's longest holds: its caches in both models (one, if
    the Generalist and the Specialist are the same model)."""
    models = {id(lm): lm for lm in (cloud.generalist, cloud.specialist)}.values()
    return sum(kv_bytes(lm.model.config, 1, LONGEST_SESSION, lm.model.dtype) for lm in models)


def size_sessions_to_memory(config: ServerConfig, cloud: CloudVerifier) -> ServerConfig:
    """`config` with the default `max_sessions` derived from the memory free now, the models loaded
    (`server.config.max_sessions_for_memory`: what the dynamic KV budget holds at the protocol's
    longest, at most 64), and logged; an explicit `max_sessions` is never changed here."""
    per_session = session_kv_bytes(cloud)
    free = available_bytes(cloud.generalist.model.device)
    at_least = 1 if config.reserved_sessions is None else config.reserved_sessions + 1
    sessions = max_sessions_for_memory(free, per_session, at_least=at_least)
    log.info(
        "max_sessions %d: what %.0f%% of the %s free holds at %.0f MiB of KV cache a session "
        "(at most 64; --max-sessions sets it)",
        sessions,
        KV_BUDGET_SHARE * 100,
        "memory" if free is None else f"{free / 2**30:.1f} GiB",
        per_session / 2**20,
    )
    return replace(config, max_sessions=sessions, max_sessions_from_memory=False)


def warn_if_sessions_outgrow_memory(config: ServerConfig, cloud: CloudVerifier) -> int:
    """Log a warning when `max_sessions` sessions at the protocol's longest would need more KV
    memory than is free; returns the bytes they would need.

    With dynamic KV each session's cache grows as it is used, so nothing is refused at start (most
    sessions are far shorter); a session whose growth the KV budget cannot cover is refused with
    RESOURCE_EXHAUSTED (`server.kv_budget`). The slot pool (`--kv slots`) allocates its caches up
    front and refuses a pool that cannot fit.
    """
    per_session = session_kv_bytes(cloud)
    need = config.max_sessions * per_session
    free = available_bytes(cloud.generalist.model.device)
    if free is not None and need > free:
        log.warning(
            "%d sessions of the protocol's longest (%d positions) would need %.1f GiB of KV cache, "
            "%.1f GiB is free: sessions past the KV budget will be refused; lower max_sessions, or use "
            "--kv slots, which sizes its caches at start",
            config.max_sessions,
            LONGEST_SESSION,
            need / 2**30,
            free / 2**30,
        )
    return need
