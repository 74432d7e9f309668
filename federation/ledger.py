"""The device's privacy ledger: every DP-SGD step it ever took, and the ε that adds up to.

One JSON file per device, kept in the device's state folder. It holds the accountant's full
composition history — ``(noise multiplier, sample rate, steps)`` triples — so ε can be recomputed
exactly after a restart, with any accountant Opacus offers, rather than trusting a stored total.
A round is recorded only after it has trained; before it trains, `Ledger.check` projects the ε the
round would bring the total to and refuses if that exceeds the device's budget, so an exhausted
device never touches its data again.

Writes are atomic (temporary file, fsync, rename): a crash leaves the previous ledger, never half
of one, and a ledger that cannot be parsed is an error rather than a silent fresh start (which
would reset the spent budget to zero).
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConfigError

__all__ = ["ACCOUNTANTS", "BudgetExhausted", "Ledger", "LedgerError", "RoundEntry", "epsilon_of"]

LEDGER_FORMAT = 1
ACCOUNTANTS = ("rdp", "prv")


class LedgerError(ConfigError):
    """The ledger file cannot be read, or a budget or accountant setting is invalid."""


class BudgetExhausted(ConfigError):
    """Training this round would push the device's ε past its budget."""


@dataclass(frozen=True)
class RoundEntry:
    """One round's DP-SGD on this device, as recorded after it trained."""

    run_id: int
    server_round: int
    adapter_version_in: int  # the global adapter version the round started from
    noise_multiplier: float
    sample_rate: float
    steps: int
    max_grad_norm: float
    epsilon_after: float  # total ε of the whole history including this round, at the ledger's δ
    delta: float
    accountant: str
    time: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def epsilon_of(history: list[tuple[float, float, int]], delta: float, accountant: str = "rdp") -> float:
    """Total ε at `delta` of a DP-SGD composition history, with Opacus's accountant."""
    if accountant not in ACCOUNTANTS:
        raise LedgerError(f"Unknown accountant {accountant!r}; use one of {', '.join(ACCOUNTANTS)}.")
    if not history:
        return 0.0
    key = tuple((float(s), float(q), int(n)) for s, q, n in history)
    return _epsilon_cached(key, float(delta), accountant)


@functools.lru_cache(maxsize=256)
def _epsilon_cached(history: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    if accountant == "prv":
        from opacus.accountants import PRVAccountant

        acc = PRVAccountant()
        acc.history = list(history)
        return float(acc.get_epsilon(delta=delta))
    # Opacus's RDPAccountant recomputes every entry's RDP curve on each call (about a second of
    # pure Python); the curve of n steps is n times the one-step curve, so compute that once per
    # (σ, q) and sum. The result is exactly Opacus's: same orders, same conversion to (ε, δ).
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as rdp_analysis

    total = sum(np.asarray(_rdp_one_step(sigma, q)) * steps for sigma, q, steps in history)
    eps, _ = rdp_analysis.get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=total, delta=delta)
    return float(eps)


@functools.lru_cache(maxsize=64)
def _rdp_one_step(noise_multiplier: float, sample_rate: float) -> tuple[float, ...]:
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis import rdp as rdp_analysis

    curve = rdp_analysis.compute_rdp(
        q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=RDPAccountant.DEFAULT_ALPHAS
    )
    return tuple(float(x) for x in np.atleast_1d(curve))


@dataclass
class Ledger:
    """A device's ε ledger; load with `Ledger.load`, which creates an empty one if there is none."""

    path: Path
    epsilon_budget: float
    delta: float
    accountant: str = "rdp"
    history: list[tuple[float, float, int]] = field(default_factory=list)
    rounds: list[RoundEntry] = field(default_factory=list)
    refusals: int = 0

    @classmethod
    def load(cls, path: str | Path, *, epsilon_budget: float, delta: float, accountant: str = "rdp") -> Ledger:
        """The ledger at `path` with the given budget; a missing file is an empty ledger (nothing spent)."""
        _check_budget(epsilon_budget, delta, accountant)
        p = Path(path)
        ledger = cls(path=p, epsilon_budget=float(epsilon_budget), delta=float(delta), accountant=accountant)
        try:
            raw = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ledger
        except OSError as exc:
            raise LedgerError(f"Cannot read the privacy ledger {p}: {exc.strerror or exc}.") from None
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
                raise ValueError("unknown format")
            ledger.history = [(float(s), float(q), int(n)) for s, q, n in data["history"]]
            ledger.rounds = [RoundEntry(**r) for r in data["rounds"]]
            ledger.refusals = int(data.get("refusals", 0))
        except (ValueError, KeyError, TypeError) as exc:
            # Starting afresh would forget the ε already spent, so a damaged ledger stops training.
            raise LedgerError(f"The privacy ledger {p} is damaged ({exc}); refusing to train without it.") from None
        return ledger

    @property
    def epsilon_spent(self) -> float:
        return epsilon_of(self.history, self.delta, self.accountant)

    @property
    def epsilon_remaining(self) -> float:
        return max(0.0, self.epsilon_budget - self.epsilon_spent)

    def project(self, noise_multiplier: float, sample_rate: float, steps: int) -> float:
        """Total ε if a round of `steps` DP-SGD steps with these settings were added."""
        return epsilon_of([*self.history, (noise_multiplier, sample_rate, steps)], self.delta, self.accountant)

    def check(self, noise_multiplier: float, sample_rate: float, steps: int) -> float:
        """The projected total ε of one more round; raises `BudgetExhausted` (and counts it) if over budget."""
        if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
            raise LedgerError(f"The noise multiplier must be a positive number, not {noise_multiplier!r}.")
        projected = self.project(noise_multiplier, sample_rate, steps)
        if projected > self.epsilon_budget:
            self.refusals += 1
            self.save()
            raise BudgetExhausted(
                f"Privacy budget exhausted: this round would bring ε to {projected:.3f} "
                f"(budget {self.epsilon_budget:g} at δ={self.delta:g}, {self.accountant}); not training."
            )
        return projected

    def record(
        self,
        *,
        run_id: int,
        server_round: int,
        adapter_version_in: int,
        history: list[tuple[float, float, int]],
        max_grad_norm: float,
    ) -> RoundEntry:
        """Add the steps the accountant saw during a round, persist, and return the round's entry."""
        steps = sum(int(n) for _, _, n in history)
        self.history.extend((float(s), float(q), int(n)) for s, q, n in history)
        noise = float(history[-1][0]) if history else 0.0
        rate = float(history[-1][1]) if history else 0.0
        entry = RoundEntry(
            run_id=int(run_id),
            server_round=int(server_round),
            adapter_version_in=int(adapter_version_in),
            noise_multiplier=noise,
            sample_rate=rate,
            steps=steps,
            max_grad_norm=float(max_grad_norm),
            epsilon_after=self.epsilon_spent,
            delta=self.delta,
            accountant=self.accountant,
            time=time.time(),
        )
        self.rounds.append(entry)
        self.save()
        return entry

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": LEDGER_FORMAT,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "accountant": self.accountant,
            "epsilon_spent": self.epsilon_spent,
            "history": [list(h) for h in self.history],
            "rounds": [r.as_dict() for r in self.rounds],
            "refusals": self.refusals,
        }

    def save(self) -> None:
        atomic_write_json(self.path, self.as_dict())


def _check_budget(epsilon_budget: float, delta: float, accountant: str) -> None:
    if not (isinstance(epsilon_budget, int | float) and epsilon_budget > 0 and math.isfinite(epsilon_budget)):
        raise LedgerError(f"The ε budget must be a positive number, not {epsilon_budget!r}.")
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise LedgerError(f"δ must be strictly between 0 and 1, not {delta!r}.")
    if accountant not in ACCOUNTANTS:
        raise LedgerError(f"Unknown accountant {accountant!r}; use one of {', '.join(ACCOUNTANTS)}.")


def atomic_write_json(path: Path, data: object) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
