"""The narrow interface between the device and a verifier, and the in-process transport.

The device talks to any `Verifier`: `open(prompt_ids, params)` returns a `VerifierSession` with
`round(commit, draft, literal) -> Verdict`, `guard_decision(...)`, `end_locally(reason)` and
`close()`. A `ResumableVerifier` (the network one) can also `resume` a generation whose session
was lost, in a new session. The in-process transport serializes every message through the wire format
(`core/wire.py`) exactly as a network transport would, so the byte counts are real and in-process
runs exercise the same parsing as remote ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from specsteer.core import wire
from specsteer.core.errors import SpecSteerError
from specsteer.core.session_types import Method, SessionParams, Verdict
from specsteer.core.wire import pb


class VerifierLost(SpecSteerError):
    """The verifier is unreachable, timed out, or went away mid-session: a fault, not a breach.

    `reason` is a short identifier (`verifier-unreachable`, `verifier-timeout`, `verifier-lost`,
    ...) for stats and audit logs; the message says what happened. The device may finish the
    generation locally; if it does, it calls `fell_back()` so the transport can record that.
    """

    def __init__(self, reason: str, message: str, *, on_fallback: Callable[[str], None] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self._on_fallback = on_fallback

    def fell_back(self) -> None:
        if self._on_fallback is not None:
            self._on_fallback(self.reason)


class VerifierSession(Protocol):
    @property
    def uplink_bytes(self) -> int:
        """Bytes sent so far; read-only to the device (a remote session counts them in its egress)."""
        ...

    @property
    def downlink_bytes(self) -> int: ...

    verifier_stats: dict[str, float]  # what the verifier reports about the session, if anything

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        """One round; `literal` is an egress-guard placeholder the cloud commits unverified."""
        ...

    def guard_decision(self, decision: str, count: int, placeholder: str) -> None:
        """Put an egress-guard decision on record (never the span), before the round it shapes."""
        ...

    def end_locally(self, reason: str) -> None:
        """Record that the device finishes this text alone (e.g. `guard-keep-local`); `close()` follows."""
        ...

    def close(self) -> None: ...


class Verifier(Protocol):
    def open(self, prompt_ids: Sequence[int], params: SessionParams) -> VerifierSession: ...


@runtime_checkable
class ResumableVerifier(Protocol):
    """A verifier that can take a generation back after losing its session (`sdk.remote.RemoteVerifier`):
    `resume` opens a new session whose Open carries `resume_ids`, the tokens the lost session had
    committed as its verifier saw them, or raises `VerifierLost` when no verifier answers in time."""

    def resume(
        self, prompt_ids: Sequence[int], params: SessionParams, resume_ids: Sequence[int]
    ) -> VerifierSession: ...


class CloudSessionLike(Protocol):
    def stats(self) -> dict[str, float]: ...

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict: ...

    def close(self) -> None: ...


class InProcessVerifier:
    """Connects a device to a cloud verifier object in the same process, through the wire format.

    `cloud_open` is the cloud side's `open(prompt_ids, params)`; `vocab_size` and `max_top_k` bound
    what the device accepts from the downlink.
    """

    def __init__(
        self,
        cloud_open: Callable[[Sequence[int], SessionParams], CloudSessionLike],
        *,
        vocab_size: int,
        max_top_k: int | None = None,
    ) -> None:
        self._cloud_open = cloud_open
        self._vocab_size = vocab_size
        self._max_top_k = max_top_k

    def open(self, prompt_ids: Sequence[int], params: SessionParams) -> InProcessSession:
        up = wire.open_to_proto(prompt_ids, params).SerializeToString()
        msg = pb.Uplink.FromString(up)
        cloud = self._cloud_open(list(msg.open.prompt_ids), wire.params_from_proto(msg.open.params))
        max_k = params.top_k if self._max_top_k is None else min(params.top_k, self._max_top_k)
        session = InProcessSession(cloud, len(up), vocab_size=self._vocab_size, max_top_k=max_k)
        session.pad_to = params.draft_len if params.padded_frames else None
        session.fusion = params.method is Method.FUSION
        return session


class InProcessSession:
    def __init__(self, cloud: CloudSessionLike, opened_bytes: int, *, vocab_size: int, max_top_k: int) -> None:
        self._cloud = cloud
        self._seq = 0
        self._vocab_size = vocab_size
        self._max_top_k = max_top_k
        self.uplink_bytes = opened_bytes
        self.downlink_bytes = 0
        self.verifier_stats: dict[str, float] = {}
        self.guard_decisions: list[tuple[str, int, str]] = []  # no audit log in-process: kept here
        self.ended_locally: str | None = None
        self.pad_to: int | None = None  # the session's K if it declared padded frames
        self.fusion = False  # the session declared method fusion: a dense fusion vector may come down

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        self._seq += 1
        up = wire.encode_round(self._seq, commit, draft, literal, pad_to=self.pad_to)
        self.uplink_bytes += len(up)
        frame = wire.decode_uplink(up, vocab_size=self._vocab_size)
        assert isinstance(frame, wire.RoundFrame)
        verdict = self._cloud.round(list(frame.commit), list(frame.draft), list(frame.literal))
        down = wire.verdict_to_proto(self._seq, verdict).SerializeToString()
        self.downlink_bytes += len(down)
        return wire.verdict_from_proto(
            pb.Downlink.FromString(down), max_top_k=self._max_top_k, vocab_size=self._vocab_size, fusion=self.fusion
        )

    def guard_decision(self, decision: str, count: int, placeholder: str) -> None:
        self.guard_decisions.append((decision, count, placeholder))

    def end_locally(self, reason: str) -> None:
        self.ended_locally = reason

    def close(self) -> None:
        self._seq += 1
        self.uplink_bytes += len(wire.close_to_proto(self._seq).SerializeToString())
        self._cloud.close()
        self.verifier_stats = self._cloud.stats()
