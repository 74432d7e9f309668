"""Prometheus metrics of one verifier: sessions, rounds, acceptance, batch sizes, latency.

Each server gets its own registry (tests run several servers in one process). No label carries a
device name or anything a device sent: only status codes and outcomes, a bounded set.

The HTTP endpoint is prometheus_client's WSGI app on a server of our own: its `start_http_server`
gives every connection a thread with no timeout, so anyone who could reach the port held a thread
and a descriptor per idle connection (980 of them left the verifier 27 descriptors). Here a
connection is closed after `_REQUEST_TIMEOUT` seconds, silent or not, and at most
`_MAX_CONNECTIONS` are served at once; more are closed on accept.

The same port answers an orchestrator's probes: `/healthz` 200 while the process runs (from before
the models load), `/readyz` 200 only while the verifier would admit a session (`Metrics.ready`:
models loaded, serving, not draining), else 503; `/metrics` the Prometheus text; any other path 404.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, make_wsgi_app

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
_REQUEST_TIMEOUT = 10.0  # seconds a scrape connection may last, and may stay silent
_MAX_CONNECTIONS = 16  # scrapers served at once: a Prometheus or two, never a crowd


class _QuietHandler(WSGIRequestHandler):
    timeout = _REQUEST_TIMEOUT  # socketserver sets it on the connection: a silent peer is dropped

    def setup(self) -> None:
        super().setup()
        # The timeout bounds each read, not the request: a peer sending a header line every few
        # seconds held its slot for ever. The whole connection gets the same bound.
        self._deadline = threading.Timer(self.timeout, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds is no news


class _BoundedMetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        super().__init__(address, _QuietHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the cap: closed at once, no thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


_Start = Callable[[str, list[tuple[str, str]]], Any]


def _plain(start: _Start, status: str, body: str) -> Iterable[bytes]:
    data = body.encode()
    start(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))])
    return [data]


class Metrics:
    def __init__(self) -> None:
        # Whether the verifier would admit a session now (the server sets it: serving, not draining).
        self.ready: Callable[[], bool] = lambda: False
        self.registry = CollectorRegistry()
        r = self.registry
        self.streams = Counter("specsteer_streams", "Session streams that reached the servicer.", registry=r)
        self.sessions_active = Gauge("specsteer_sessions_active", "Sessions open now.", registry=r)
        self.sessions = Counter(
            "specsteer_sessions", "Sessions by how they ended.", ["outcome"], registry=r
        )  # outcome: closed, ended (text finished), refused, expired, evicted, vanished, failed
        self.rounds = Counter("specsteer_rounds", "Verified rounds.", registry=r)
        self.drafted = Counter("specsteer_drafted_tokens", "Draft tokens received.", registry=r)
        self.accepted = Counter("specsteer_accepted_tokens", "Draft tokens accepted.", registry=r)
        self.acceptance = Histogram(
            "specsteer_round_acceptance_ratio",
            "Accepted / drafted, per round with a draft.",
            buckets=(0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0),
            registry=r,
        )
        self.rejected_messages = Counter(
            "specsteer_rejected_messages", "Uplinks refused, by gRPC status.", ["code"], registry=r
        )
        # server/batching.py: concurrent sessions' forwards of one model are merged when batching is on.
        self.batch_size = Histogram(
            "specsteer_batch_size",
            "Sequences merged into each model forward (1: the forward ran alone).",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.unmerged = Counter(
            "specsteer_unmerged_forwards",
            "Forwards run alone with batching on because the model did not allow a merge, by reason.",
            ["reason"],  # cache, window (sliding-window layers), error (the merged forward failed)
            registry=r,
        )
        self.batching = Gauge("specsteer_batching_enabled", "1 if cross-session batching is on.", registry=r)
        self.round_latency = Histogram(
            "specsteer_round_latency_seconds",
            "From a round's uplink to its downlink.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.open_latency = Histogram(
            "specsteer_open_latency_seconds",
            "Opening a session (prompt prefill).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.front_refused = Counter(
            "specsteer_front_refused",
            "Connections the per-source front closed: source (over its cap), total, silent (no first byte), "
            "handshake (gRPC sent nothing back within the handshake deadline).",
            ["reason"],
            registry=r,
        )
        self.cert_reloads = Counter(
            "specsteer_cert_reloads", "Server certificate reloads, by result.", ["result"], registry=r
        )
        self._http: tuple[_BoundedMetricsServer, threading.Thread] | None = None

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 if it was never set), e.g. value("specsteer_rounds_total")."""
        return self.registry.get_sample_value(name, labels or {}) or 0.0

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def serve(self, host: str, port: int) -> int:
        """Expose /metrics over HTTP; returns the bound port (port 0 picks one)."""
        httpd = _BoundedMetricsServer((host.strip("[]"), port))
        httpd.set_app(self._app(make_wsgi_app(self.registry)))
        thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
        thread.start()
        self._http = (httpd, thread)
        return int(httpd.server_port)

    def _app(self, metrics_app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        def app(environ: dict[str, Any], start: _Start) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics_app(environ, start)
            if path == "/healthz":
                return _plain(start, "200 OK", "alive\n")
            if path == "/readyz":
                if self.ready():
                    return _plain(start, "200 OK", "ready\n")
                return _plain(start, "503 Service Unavailable", "not ready\n")
            return _plain(start, "404 Not Found", "not found: /metrics, /healthz or /readyz\n")

        return app

    @property
    def serving_http(self) -> bool:
        return self._http is not None

    def stop(self) -> None:
        if self._http is not None:
            httpd, thread = self._http
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=5)
            self._http = None
