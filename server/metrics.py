"""Prometheus metrics of one verifier: sessions, rounds, acceptance, batch sizes, latency.

Each server gets its own registry (tests run several servers in one process). No label carries a
device name or anything a device sent: only status codes and outcomes, a bounded set.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.streams = Counter("specsteer_streams", "Session streams that reached the servicer.", registry=r)
        self.sessions_active = Gauge("specsteer_sessions_active", "Sessions open now.", registry=r)
        self.sessions = Counter(
            "specsteer_sessions", "Sessions by how they ended.", ["outcome"], registry=r
        )  # outcome: closed, ended (text finished), refused, expired, vanished, failed
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
            "Connections the per-source front closed: source (over its cap), total, silent (no first byte).",
            ["reason"],
            registry=r,
        )
        self.cert_reloads = Counter(
            "specsteer_cert_reloads", "Server certificate reloads, by result.", ["result"], registry=r
        )
        self._http: tuple[object, threading.Thread] | None = None

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 if it was never set), e.g. value("specsteer_rounds_total")."""
        return self.registry.get_sample_value(name, labels or {}) or 0.0

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def serve(self, host: str, port: int) -> int:
        """Expose /metrics over HTTP; returns the bound port (port 0 picks one)."""
        httpd, thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = (httpd, thread)
        return int(httpd.server_port)

    def stop(self) -> None:
        if self._http is not None:
            httpd, thread = self._http
            httpd.shutdown()  # type: ignore[attr-defined]
            httpd.server_close()  # type: ignore[attr-defined]
            thread.join(timeout=5)
            self._http = None
