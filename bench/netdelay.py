"""A loopback TCP relay that delays each direction by half a round-trip time.

The kernels here have no `netem` qdisc (`tc qdisc ... netem` fails: "Specified qdisc kind is
unknown"; see shared/docs/testbed.md), so latency is added in user space. The relay forwards raw
bytes, so TLS stays end to end between device and verifier; it also counts the bytes that
cross it (TLS records and HTTP/2 framing included).

    with DelayRelay(target_port=server_port, rtt_ms=50) as relay:
        connect to 127.0.0.1:relay.port
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="delay-relay", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delay relay did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        # Only `close` cancels a handler. Ending it normally keeps Python 3.11's stream callback,
        # which calls exception() on the finished task, from logging the CancelledError.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pipe(client_r, server_w, upstream=True),
                self._pipe(server_r, client_w, upstream=False),
                return_exceptions=True,
            )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool) -> None:
        # Chunks are stamped on arrival and released in order one one-way delay later, so the
        # link behaves like a long wire with unlimited bandwidth, not a slow one.
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def release() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()
            with contextlib.suppress(OSError):
                writer.write_eof()

        sender = asyncio.ensure_future(release())
        try:
            while chunk := await reader.read(65536):
                if upstream:
                    self.upstream_bytes += len(chunk)
                else:
                    self.downstream_bytes += len(chunk)
                queue.put_nowait((time.monotonic() + self.one_way, chunk))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((time.monotonic() + self.one_way, b""))
        with contextlib.suppress(ConnectionError, OSError):
            await sender

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> DelayRelay:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
