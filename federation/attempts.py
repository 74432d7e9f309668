"""A scheduled run's right to publish: one attempt holds it at a time, and one that times out loses it.

`federation schedule` opens an attempt before each try: a fresh random token written to
``<server-state-dir>/attempt.json`` and handed to the run as run config ``attempt-token``. When
the try overruns its deadline the scheduler revokes the token. The ServerApp publishes (stores a
new adapter version, appends its run-log line) only inside `publishing`, which holds the lease's
lock and checks that its token is the open one; revoking takes the same lock. So once `revoke`
returns, the timed-out run can publish nothing, however late it finishes: whether it runs in this
process (a simulation cannot be killed) or in a SuperLink's ServerApp that outlives the killed
``flwr run``. It fails closed: a run with a token whose lease is missing, unreadable, revoked or
superseded by a later attempt publishes nothing. A run without a token (``federation run``) is
not scheduled and publishes as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from specsteer.core.fileio import atomic_write
from specsteer.federation.errors import AttemptRevoked

__all__ = ["ATTEMPT_FILE", "TOKEN_KEY", "Attempt", "AttemptRevoked", "publishing"]

ATTEMPT_FILE = "attempt.json"
TOKEN_KEY = "attempt-token"  # the run config key that carries the token to the ServerApp


@contextlib.contextmanager
def _locked(server_dir: Path) -> Iterator[Path]:
    """The lease file, under an exclusive lock shared by the scheduler and every ServerApp."""
    server_dir.mkdir(parents=True, exist_ok=True)
    with open(server_dir / (ATTEMPT_FILE + ".lock"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield server_dir / ATTEMPT_FILE
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class Attempt:
    """One scheduled try: its token and, for an in-process run, the event that cancels it."""

    server_dir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    cancelled: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def open(cls, server_dir: Path) -> Attempt:
        """A new attempt that holds the right to publish (any earlier attempt loses it)."""
        attempt = cls(server_dir=Path(server_dir))
        with _locked(attempt.server_dir) as path:
            _write(path, {"token": attempt.token, "revoked": False, "published": []})
        return attempt

    def revoke(self) -> list[str]:
        """Take away this attempt's right to publish; returns what it published before.

        Once this returns the attempt can publish nothing more.
        """
        self.cancelled.set()
        with _locked(self.server_dir) as path:
            lease = _read(path)
            if lease.get("token") != self.token:
                return []
            _write(path, {**lease, "revoked": True})
            published = lease.get("published")
            return [str(p) for p in published] if isinstance(published, list) else []


def _write(path: Path, lease: dict[str, object]) -> None:
    atomic_write(path, json.dumps(lease) + "\n")


@contextlib.contextmanager
def publishing(server_dir: Path, token: str | None, what: str) -> Iterator[None]:
    """Hold the lease while publishing `what`; raise `AttemptRevoked` unless `token` is the open attempt's.

    What was published is noted in the lease, so the scheduler can say what a timed-out attempt
    had published before its deadline. `token` None (an unscheduled run) publishes freely.
    """
    if token is None:
        yield
        return
    with _locked(Path(server_dir)) as path:
        lease = _read(path)
        if lease.get("token") != token or lease.get("revoked") is not False:
            raise AttemptRevoked(
                "This scheduled attempt may no longer publish (it overran its deadline or a retry replaced it); "
                "its result is discarded."
            )
        yield
        published = lease.get("published")
        _write(path, {**lease, "published": [*(published if isinstance(published, list) else []), what]})
