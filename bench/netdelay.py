"""A loopback TCP relay that delays each direction by half a round-trip time.

The kernels here have no `netem` qdisc (`tc qdisc ... netem` fails: "Specified qdisc kind is
unknown"; see shared/docs/testbed.md), so latency is added in user space. The relay forwards raw
bytes, so TLS stays end to end between device and verifier; it also counts the bytes that
cross it (TLS records and HTTP/2 framing included).

    with DelayRelay(target_port=server_port, rtt_ms=50) as relay:
        connect to 127.0.0.1:relay.port

Each direction of a connection is a reader thread, which stamps every chunk on arrival, and a
writer thread, which releases the chunks in order one one-way delay later, so the link behaves
like a long wire with unlimited bandwidth, not a slow one. Threads, not an asyncio loop: asyncio
sleeps through `epoll`, whose timeout Python rounds up to the next millisecond, so an asyncio relay
could release each chunk up to a millisecond late in each direction (and a gRPC message crosses in
several chunks). `time.sleep` wakes within a fraction of that. Whatever the relay still adds,
`bench.speed` measures with the path's round trip (`bench.path_probe`).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from types import TracebackType


class DelayRelay:
    def __init__(self, target_port: int, *, rtt_ms: float, target_host: str = "127.0.0.1") -> None:
        if rtt_ms < 0:
            raise ValueError("rtt_ms must be non-negative")
        self.target = (target_host, target_port)
        self.one_way = rtt_ms / 2000.0
        self.upstream_bytes = 0  # device -> verifier
        self.downstream_bytes = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._start(self._accept, "delay-relay")

    def _start(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
                for s in (client, server):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._pipe(client, server, upstream=True)
                self._pipe(server, client, upstream=False)

    def _pipe(self, src: socket.socket, dst: socket.socket, *, upstream: bool) -> None:
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            with contextlib.suppress(OSError):
                while chunk := src.recv(65536):
                    with self._lock:
                        if upstream:
                            self.upstream_bytes += len(chunk)
                        else:
                            self.downstream_bytes += len(chunk)
                    chunks.put((time.monotonic() + self.one_way, chunk))
            chunks.put((time.monotonic() + self.one_way, b""))

        def release() -> None:
            while True:
                due, chunk = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not chunk:
                    break
                try:
                    dst.sendall(chunk)
                except OSError:
                    return  # the other side is gone; the reader ends with its socket
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        direction = "up" if upstream else "down"
        self._start(read, f"delay-relay-{direction}-read")
        self._start(release, f"delay-relay-{direction}-release")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone does not)
        self._listener.close()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(5)

    def __enter__(self) -> DelayRelay:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
