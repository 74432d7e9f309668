"""The verifier's errors, in one place, under `core.errors.SpecSteerError` so one `except` in a CLI catches all.

    SpecSteerError              core.errors: the root every package's errors hang from
    ├── ConfigError             a bad option, config file, model setting or adapter request
    │   ├── AdapterError        core.errors: a global adapter folder that is missing or damaged
    │   ├── PkiError            a PKI directory or certificate that cannot be created or used
    │   └── SlotPoolTooLarge    a slot pool's KV buffers that the device's free memory cannot hold
    ├── NotADevice              a client certificate with no valid path to the device CA (the stream is refused)
    ├── RevocationUnreadable    the revocation list cannot be used now: every new stream is refused
    ├── NoSessionSlot           no session slot for a device within the queue's wait (it may fall back)
    │   └── Draining            the verifier is draining: no new session (the device falls back)
    ├── SlotOverflow            a block that would run past its KV slot's positions (server.slot_pool)
    ├── ModelLoadError          core.errors: a model path or name that cannot be loaded
    ├── ProfileError            core.errors: a profile file the cloud side was given cannot be read
    └── ProtocolError           core.errors: a device message that breaks the session contract
        ├── ContractError       core.contract: a frame the one session contract refuses
        └── SessionTooLong      a round past what a session may hold (the protocol's bound, or the KV slots)
            └── SessionOverCapacity   within the protocol's bound, past this verifier's KV slots

`PkiError` (which `server.pki` still exports), `NotADevice`, `RevocationUnreadable`, `NoSessionSlot`,
`Draining`, `SlotOverflow`, `SlotPoolTooLarge` and `SessionTooLong` are defined here; the others come from
the layers below and are gathered here, so a caller imports its `except` clauses from one module. A
refusal inside the gRPC service (`server.service._Abort`) is no error a caller sees: it ends a stream
with a status.
"""

from __future__ import annotations

from specsteer.core.contract import ContractError
from specsteer.core.errors import AdapterError, ConfigError, ModelLoadError, ProfileError, ProtocolError, SpecSteerError

__all__ = [
    "AdapterError",
    "ConfigError",
    "ContractError",
    "Draining",
    "ModelLoadError",
    "NoSessionSlot",
    "NotADevice",
    "PkiError",
    "ProfileError",
    "ProtocolError",
    "RevocationUnreadable",
    "SessionOverCapacity",
    "SessionTooLong",
    "SlotOverflow",
    "SlotPoolTooLarge",
    "SpecSteerError",
]


class PkiError(ConfigError):
    """A PKI directory or certificate that cannot be created or used."""


class NotADevice(SpecSteerError):
    """The client certificate is not a valid device certificate under the device CA; says why."""


class RevocationUnreadable(SpecSteerError):
    """The revocation list cannot be read or parsed right now: every new stream is refused until it can."""


class NoSessionSlot(SpecSteerError):
    """No session slot within the wait (or the queue is full): the device is told why and may fall back."""


class Draining(NoSessionSlot):
    """The verifier is draining (about to stop): an Open is refused, its queued wait ended, with UNAVAILABLE."""


class SlotOverflow(SpecSteerError):
    """A block that would run past its KV slot's `max_len` positions (`server.slot_pool`)."""


class SlotPoolTooLarge(ConfigError):
    """A slot pool whose KV buffers (`kv_slots` x `kv_max_len` positions) the device's free memory
    cannot hold (`server.slot_pool`): refused before anything is allocated, with the figures."""


class SessionTooLong(ProtocolError):
    """A round that would take its session past what the verifier holds for one: the protocol's
    longest generation (`core.limits.MAX_NEW_TOKENS`), or its KV slots' positions.
    The stream ends with OUT_OF_RANGE; other sessions are unaffected."""


class SessionOverCapacity(SessionTooLong):
    """A session within the protocol's bounds that this verifier's KV slots are too short for: the
    verifier's limit, not the device's error, so the stream ends with RESOURCE_EXHAUSTED and the
    device may finish the text on its own."""
