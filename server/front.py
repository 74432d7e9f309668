"""A TCP front for the verifier's public port: a per-source connection cap before anything else.

gRPC core caps the connections it holds in total (`grpc.max_allowed_incoming_connections`), not per
source address: one peer without a certificate could hold every slot by reconnecting, and every
device would be turned away while it did. With `max_connections_per_source` set (`server serve
--max-connections-per-source N`), the public port is this accept loop instead:

- a connection from an address that already holds N, or beyond the total cap, is closed at once
  (counted in `specsteer_front_refused_total{reason}`), so one source can never hold more than N
  descriptors and the others always find room; an IPv6 source is its /64 network (what one
  subscriber is given), an IPv4-mapped address its IPv4 address;
- a connection that sends nothing within the handshake deadline is closed;
- every other is piped, bytes unchanged, to gRPC's own listener on a loopback port: TLS, mutual
  authentication and every other limit stay gRPC's.

Written here because grpcio offers no per-source cap and the standard library no proxy; where a
fronting proxy or a firewall (`connlimit`) does this, leave the option unset (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections import Counter

from specsteer.server.metrics import Metrics

__all__ = ["ConnectionFront", "source_of"]

_CHUNK = 64 * 1024
# One IPv6 subscriber is given a /64 (RFC 6177) and picks any address in it: counted per address,
# one peer would hold N connections from each of 2^64 addresses.
IPV6_SOURCE_PREFIX = 64


def source_of(address: str) -> str:
    """What the per-source cap counts for a peer address: an IPv4 address (also when it arrives
    IPv4-mapped on an IPv6 socket), or an IPv6 address's /64 network."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # a link-local address's zone is no part of it
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_SOURCE_PREFIX), strict=False))
    return str(ip)


class ConnectionFront:
    """Accepts on the public address; caps per source and in total; pipes to `backend_port`."""

    def __init__(
        self, backend_port: int, *, per_source: int, total: int, first_byte_timeout: float, metrics: Metrics
    ) -> None:
        self.backend_port = backend_port
        self.per_source, self.total, self.first_byte_timeout = per_source, total, first_byte_timeout
        self.metrics = metrics
        self.held: Counter[str] = Counter()  # source address -> connections held now
        self._held_total = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def bind(self, host: str, port: int) -> int:
        """Bind (not yet accepting); the bound port."""
        self._server = await asyncio.start_server(
            self._accept, host, port, start_serving=False, backlog=4096, reuse_port=False
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        assert self._server is not None
        await self._server.start_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = source_of(str(peer[0])) if peer else "?"
        reason = None
        if self.held[source] >= self.per_source:
            reason = "source"
        elif self._held_total >= self.total:
            reason = "total"
        if reason is not None:
            self.metrics.front_refused.labels(reason).inc()
            writer.transport.abort()  # no FIN handshake to wait for: the descriptor goes now
            return
        self.held[source] += 1
        self._held_total += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.held[source] -= 1
            self._held_total -= 1
            if not self.held[source]:
                del self.held[source]
            writer.transport.abort()
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await asyncio.wait_for(reader.read(_CHUNK), self.first_byte_timeout)
        except TimeoutError:
            self.metrics.front_refused.labels("silent").inc()
            return
        if not first:
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
        pipes = [asyncio.ensure_future(_pipe(reader, up_writer)), asyncio.ensure_future(_pipe(up_reader, writer))]
        try:
            up_writer.write(first)
            # Both directions to their ends; a broken one (a reset) ends both.
            await asyncio.wait(pipes, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            up_writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the other side (so TLS close_notify and GOAWAY get through)."""
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
