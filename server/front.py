"""A TCP front for the verifier's public port: a per-source connection cap before anything else.

gRPC core caps the connections it holds in total (`grpc.max_allowed_incoming_connections`), not per
source address: one peer without a certificate could hold every slot by reconnecting, and every
device would be turned away while it did. With `max_connections_per_source` set (`server serve
--max-connections-per-source N`), the public port is this accept loop instead:

- a connection from an address that already holds N, or beyond the total cap, is closed at once
  (counted in `specsteer_front_refused_total{reason}`), so one source can never hold more than N
  descriptors and the others always find room; an IPv6 source is its /64 network (what one
  subscriber is given), an IPv4-mapped address its IPv4 address;
- a connection that sends nothing within the handshake deadline is closed, and so is one to which
  gRPC has sent nothing back by then (the deadline runs from the accept);
- every other is piped, bytes unchanged, to gRPC's own listener: TLS, mutual authentication and
  every other limit (gRPC's handshake deadline for the whole handshake among them) stay gRPC's;
- a piped connection is closed both ways, and uncounted, as soon as either side is done: when
  gRPC drops a connection (its handshake deadline, a GOAWAY), the client's side goes with it, so
  a peer that sent one byte and went silent holds its slot for the deadline, not until it leaves;
- gRPC listens on a Unix socket (0600) in a directory of its own (0700), not on a TCP port: only
  the front (and the server's own user) can reach it, so no local process can go around the caps;
- on an IPv6 address the listening socket is dual-stack (`::` takes IPv4 too), as gRPC's is.

Written here because grpcio offers no per-source cap and the standard library no proxy; where a
fronting proxy or a firewall (`connlimit`) does this, leave the option unset (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import socket
import tempfile
from collections import Counter

from specsteer.server.metrics import Metrics

__all__ = ["ConnectionFront", "source_of"]

_CHUNK = 64 * 1024
# After a pipe ends, how long what is still buffered for a side may take to leave before it is cut.
_FLUSH_TIMEOUT = 1.0
# A Unix socket's path must fit `sockaddr_un.sun_path` (108 bytes on Linux, 104 on the BSDs).
_MAX_UNIX_PATH = 100
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
    """Accepts on the public address; caps per source and in total; pipes to gRPC's Unix socket `backend`.

    Without `backend`, a private directory (0700) is made for it, and removed by `stop`/`close`.
    """

    def __init__(
        self,
        backend: str | None = None,
        *,
        per_source: int,
        total: int,
        handshake_timeout: float,
        metrics: Metrics,
    ) -> None:
        self._private_dir: str | None = None
        if backend is None:
            self._private_dir = tempfile.mkdtemp(prefix="specsteer-front-")  # mode 0700, ours
            backend = os.path.join(self._private_dir, "verifier.sock")
            if len(os.fsencode(backend)) > _MAX_UNIX_PATH:
                self.close()
                raise OSError(f"the backend socket path {backend!r} is too long for a Unix socket; set TMPDIR")
        self.backend = backend
        self.per_source, self.total, self.handshake_timeout = per_source, total, handshake_timeout
        self.metrics = metrics
        self.held: Counter[str] = Counter()  # source address -> connections held now
        self._held_total = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def held_total(self) -> int:
        """Connections held now, all sources together."""
        return self._held_total

    def restrict_backend(self) -> None:
        """Once gRPC has bound `backend`: the socket is the server user's alone (0600)."""
        os.chmod(self.backend, 0o600)

    async def bind(self, host: str, port: int) -> int:
        """Bind (not yet accepting); the bound port."""
        sock = _dual_stack_socket(host, port)
        if sock is not None:
            self._server = await asyncio.start_server(self._accept, sock=sock, start_serving=False, backlog=4096)
        else:
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
        self.close()

    def close(self) -> None:
        """Remove the private directory (and the socket in it), if this front made one."""
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None

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
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # cancelled by `stop`: this task is the connection's own, nothing awaits it
        finally:
            writer.transport.abort()
            self.held[source] -= 1
            self._held_total -= 1
            if not self.held[source]:
                del self.held[source]
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.handshake_timeout  # the client's first bytes, and gRPC's answer
        try:
            async with asyncio.timeout_at(deadline):
                first = await reader.read(_CHUNK)
        except TimeoutError:
            self.metrics.front_refused.labels("silent").inc()
            return
        if not first:
            return
        async with asyncio.timeout(self.handshake_timeout):  # a TimeoutError is an OSError: closed
            up_reader, up_writer = await asyncio.open_unix_connection(self.backend)
        try:
            up_writer.write(first)
            upstream = asyncio.ensure_future(_pipe(reader, up_writer))
            downstream = asyncio.ensure_future(_pipe(up_reader, writer, first_by=deadline))
            pipes = [upstream, downstream]
            try:
                # The first side done ends the connection, both ways: a client that sent a byte and
                # went silent leaves when gRPC drops it, not when it chooses to.
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
            if not downstream.cancelled() and isinstance(downstream.exception(), TimeoutError):
                self.metrics.front_refused.labels("handshake").inc()
            # What one side sent last (a GOAWAY, a TLS alert) gets a moment to reach the other.
            await asyncio.gather(_close(writer), _close(up_writer))
        finally:
            up_writer.transport.abort()


def _dual_stack_socket(host: str, port: int) -> socket.socket | None:
    """For an IPv6 address, a bound TCP socket that also takes IPv4 (`::` as gRPC binds it: asyncio
    would set IPV6_V6ONLY); None for anything else (asyncio binds an IPv4 address or a name)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    address = socket.getaddrinfo(
        host, port, socket.AF_INET6, socket.SOCK_STREAM, 0, socket.AI_PASSIVE | socket.AI_NUMERICHOST
    )[0][4]
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError, AttributeError):  # a system without dual-stack: IPv6 only
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close after what is buffered has left, for at most `_FLUSH_TIMEOUT`; then cut."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), _FLUSH_TIMEOUT)
    writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first_by: float | None = None) -> None:
    """Copy until EOF, then half-close the other side (so TLS close_notify and GOAWAY get through).
    With `first_by` (a loop time), the first bytes must come by then (TimeoutError otherwise)."""
    try:
        if first_by is not None:
            async with asyncio.timeout_at(first_by):
                chunk = await reader.read(_CHUNK)
            if not chunk:
                return
            writer.write(chunk)
            await writer.drain()
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
