"""Whether the device may take part now: the state the embedding app reports, and how fresh it is.

The device takes part in a round only while it is idle, charging and on an unmetered network (its
own ``require-…`` policy, `federation.participant`). Only the app embedding the SDK knows these states
(the OS tells it), so it reports them::

    from specsteer.federation.eligibility import report_state
    report_state(idle=True, charging=True, unmetered=False, state_dir=device_state_dir)

or, on the reference device, ``federation device-state --state-dir DIR --idle yes --charging no
--unmetered yes``. Either writes ``DIR/eligibility.json`` atomically (`core.fileio.atomic_write`)
with the time it was reported; the device reads it at every message (`FileEligibility`) from its
node config's ``eligibility-file``, or from ``eligibility.json`` in its own state folder. A state
older than ``eligibility-max-age`` seconds (default 900: 15 minutes), dated in the future, or that
cannot be read is not eligible: an app that stopped reporting (killed, crashed) must not leave
the device training on battery.

An app running the device in its own process can hand it any `EligibilitySource` instead (the
OS's state read live); the file is one implementation of it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from specsteer.core.errors import ConfigError
from specsteer.core.fileio import atomic_write

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "FLAGS",
    "STATE_FILE",
    "AlwaysEligible",
    "DeviceState",
    "EligibilitySource",
    "FileEligibility",
    "FixedEligibility",
    "read_state",
    "report_state",
]

FLAGS = ("idle", "charging", "unmetered")
STATE_FILE = "eligibility.json"
DEFAULT_MAX_AGE_S = 15 * 60.0
# A report dated this far past the device's clock is not trusted (clock skew allowed, no more).
FUTURE_SKEW_S = 60.0


@dataclass(frozen=True)
class DeviceState:
    """The device's state as the embedding app reported it, and when (seconds since the epoch)."""

    idle: bool
    charging: bool
    unmetered: bool
    reported_at: float

    def flags(self) -> dict[str, bool]:
        return {"idle": self.idle, "charging": self.charging, "unmetered": self.unmetered}

    def as_dict(self) -> dict[str, Any]:
        return {**self.flags(), "reported_at": self.reported_at}


@runtime_checkable
class EligibilitySource(Protocol):
    """Where the device reads its eligibility flags, at every message."""

    def flags(self) -> dict[str, bool]:
        """``{"idle": …, "charging": …, "unmetered": …}`` right now; all False when unknown or stale."""
        ...


def report_state(
    *, idle: bool, charging: bool, unmetered: bool, state_dir: str | Path, now: float | None = None
) -> DeviceState:
    """Record the device's state for its policy to read: ``state_dir/eligibility.json``, atomically.

    The embedding app calls this whenever the OS tells it one of the states changed, and at least
    every few minutes (a report older than the device's ``eligibility-max-age`` is not eligible).
    """
    for name, value in (("idle", idle), ("charging", charging), ("unmetered", unmetered)):
        if not isinstance(value, bool):
            raise ConfigError(f"The device state's {name} must be true or false, not {value!r}.")
    state = DeviceState(idle, charging, unmetered, time.time() if now is None else float(now))
    folder = Path(state_dir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / STATE_FILE, json.dumps(state.as_dict()) + "\n")
    return state


def read_state(path: str | Path) -> DeviceState | None:
    """The state reported in `path`, or None if it cannot be read or is not one.

    A file with no ``reported_at`` (written by hand or by an older OS hook, the flags alone) is
    dated by its modification time.
    """
    target = Path(path)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        mtime = target.stat().st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    when = data.get("reported_at", mtime)
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
        return None
    return DeviceState(
        idle=data.get("idle") is True,
        charging=data.get("charging") is True,
        unmetered=data.get("unmetered") is True,
        reported_at=float(when),
    )


@dataclass(frozen=True)
class FileEligibility:
    """The state last reported in a file (`report_state`), eligible only while it is fresh."""

    path: Path
    max_age_s: float = DEFAULT_MAX_AGE_S
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def flags(self) -> dict[str, bool]:
        state = read_state(self.path)
        if state is None:  # the device cannot vouch for its state: sit out
            return dict.fromkeys(FLAGS, False)
        age = self.clock() - state.reported_at
        if not -FUTURE_SKEW_S <= age <= self.max_age_s:
            return dict.fromkeys(FLAGS, False)
        return state.flags()


@dataclass(frozen=True)
class FixedEligibility:
    """Flags given once (node config ``idle``, ``charging``, ``unmetered``); an unset one is False."""

    given: Mapping[str, bool]

    def flags(self) -> dict[str, bool]:
        return {f: bool(self.given.get(f, False)) for f in FLAGS}


@dataclass(frozen=True)
class AlwaysEligible:
    """No source configured: a plugged-in test machine (every flag set)."""

    def flags(self) -> dict[str, bool]:
        return dict.fromkeys(FLAGS, True)
