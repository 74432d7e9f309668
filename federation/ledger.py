"""The device's privacy ledger: every DP-SGD step it ever took, and the ε that adds up to.

One JSON file per device, kept in the device's state folder, in the format of `privacy.ledger`
(the one parser, shared with `privacy budget`). It holds the accountant's full composition
history — ``(noise multiplier, sample rate, steps)`` triples — so ε can be recomputed exactly
after a restart rather than trusting a stored total. A round is recorded only after it has
trained; before it trains, `Ledger.check` projects the ε the round would bring the total to and
refuses if that exceeds the device's budget, so an exhausted device never touches its data again.

The device's DP policy (budget, δ, accountant, DP required, minimum noise multiplier) is fixed
when the ledger is created: a later node config that differs is refused rather than obeyed.

Concurrency: every read-modify-write happens under an exclusive lock on ``ledger.json.lock``
(`fcntl.flock`), reloading the file first, so two runs (or processes) on one device never lose an
update; `Ledger.hold` keeps the lock across a whole round (check, train, record) so two rounds
cannot both pass the budget check. Writes are atomic (temporary file, fsync, rename): a crash
leaves the previous ledger, never half of one, and a ledger that cannot be parsed is an error
rather than a silent fresh start (which would reset the spent budget to zero).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.fileio import atomic_write
from federation.errors import BudgetExhausted
from privacy.ledger import ACCOUNTANTS, LedgerData, LedgerError, epsilon_of, ledger_json, read_ledger_file

__all__ = [
    "ACCOUNTANTS",
    "BudgetExhausted",
    "Ledger",
    "LedgerError",
    "RoundEntry",
    "atomic_write_json",
    "epsilon_of",
]


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


@dataclass
class Ledger:
    """A device's ε ledger; load with `Ledger.load`, which creates an empty one if there is none."""

    path: Path
    epsilon_budget: float
    delta: float
    accountant: str = "rdp"
    dp_required: bool = True
    min_noise_multiplier: float = 0.0
    history: list[tuple[float, float, int]] = field(default_factory=list)
    rounds: list[RoundEntry] = field(default_factory=list)
    refusals: int = 0
    _lock_depth: int = field(default=0, repr=False, compare=False)
    _lock_file: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        epsilon_budget: float,
        delta: float,
        accountant: str = "rdp",
        dp_required: bool | None = None,
        min_noise_multiplier: float | None = None,
    ) -> Ledger:
        """The ledger at `path`; a missing file is an empty ledger (nothing spent) with this policy.

        An existing ledger keeps the policy it was created with: asking for another is a `LedgerError`.
        `dp_required` and `min_noise_multiplier` left at None accept what the ledger fixed (a new
        ledger: DP required, no noise floor).
        """
        _check_budget(epsilon_budget, delta, accountant, min_noise_multiplier or 0.0)
        ledger = cls(
            path=Path(path),
            epsilon_budget=float(epsilon_budget),
            delta=float(delta),
            accountant=accountant,
            dp_required=True if dp_required is None else bool(dp_required),
            min_noise_multiplier=0.0 if min_noise_multiplier is None else float(min_noise_multiplier),
        )
        ledger._reload(strict=(dp_required is not None, min_noise_multiplier is not None))
        return ledger

    def _reload(self, *, strict: tuple[bool, bool] | None = None) -> None:
        data = read_ledger_file(self.path)
        if data is None:
            return
        if strict is not None:
            self._check_policy(data, *strict)
        self.epsilon_budget, self.delta, self.accountant = data.epsilon_budget, data.delta, data.accountant
        if data.policy_recorded:
            self.dp_required, self.min_noise_multiplier = data.dp_required, data.min_noise_multiplier
        self.history = list(data.history)
        try:
            self.rounds = [RoundEntry(**r) for r in data.rounds]
        except TypeError as exc:
            raise LedgerError(f"the privacy ledger {self.path} is damaged: a round entry {exc}") from None
        self.refusals = data.refusals

    def _check_policy(self, data: LedgerData, required_given: bool, floor_given: bool) -> None:
        names = ["budget", "δ", "accountant"]
        asked: list[object] = [self.epsilon_budget, self.delta, self.accountant]
        fixed: list[object] = [data.epsilon_budget, data.delta, data.accountant]
        if data.policy_recorded and required_given:
            names.append("DP required")
            asked.append(self.dp_required)
            fixed.append(data.dp_required)
        if data.policy_recorded and floor_given:
            names.append("minimum noise multiplier")
            asked.append(self.min_noise_multiplier)
            fixed.append(data.min_noise_multiplier)
        if asked != fixed:
            raise LedgerError(
                f"The device's DP policy is fixed by its ledger ({', '.join(names)} = "
                f"{', '.join(map(str, fixed))}); the node config asks for {', '.join(map(str, asked))}. "
                "Start a new state-dir to change it."
            )

    @contextlib.contextmanager
    def hold(self) -> Iterator[Ledger]:
        """Hold the ledger's exclusive lock (re-entrant), with the newest state reloaded from disk."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield self
            finally:
                self._lock_depth -= 1
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path.with_name(self.path.name + ".lock"), "a+b")  # noqa: SIM115 - held across the yield
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            self._lock_depth, self._lock_file = 1, handle
            self._reload()
            yield self
        finally:
            self._lock_depth, self._lock_file = 0, None
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()

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
        with self.hold():
            projected = self.project(noise_multiplier, sample_rate, steps)
            if not projected <= self.epsilon_budget:  # NaN (an accountant that failed) is over budget too
                self.refusals += 1
                self.save()
                # No ε figures: the projected total depends on the history's size, which stays on the device.
                raise BudgetExhausted("Privacy budget exhausted: this round would exceed the device's ε budget.")
        return projected

    def affordable_steps(self, noise_multiplier: float, sample_rate: float, most: int) -> int:
        """The most DP-SGD steps, up to `most`, that one more round can take within the budget (0: none)."""
        if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
            raise LedgerError(f"The noise multiplier must be a positive number, not {noise_multiplier!r}.")
        low, high = 0, max(0, int(most))
        # ε grows with the number of steps, so the largest affordable count is found by bisection.
        while low < high:
            mid = (low + high + 1) // 2
            if self.project(noise_multiplier, sample_rate, mid) <= self.epsilon_budget:  # False for NaN
                low = mid
            else:
                high = mid - 1
        return low

    def count_refusal(self) -> None:
        """Note a round the device sat out for lack of budget (the count is in `privacy budget`)."""
        with self.hold():
            self.refusals += 1
            self.save()

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
        with self.hold():
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

    def data(self) -> LedgerData:
        return LedgerData(
            epsilon_budget=self.epsilon_budget,
            delta=self.delta,
            accountant=self.accountant,
            history=list(self.history),
            rounds=[r.as_dict() for r in self.rounds],
            refusals=self.refusals,
            dp_required=self.dp_required,
            min_noise_multiplier=self.min_noise_multiplier,
        )

    def as_dict(self) -> dict[str, Any]:
        return ledger_json(self.data())

    def save(self) -> None:
        with self.hold():
            atomic_write_json(self.path, self.as_dict())


def _check_budget(epsilon_budget: float, delta: float, accountant: str, min_noise: float = 0.0) -> None:
    if not (isinstance(epsilon_budget, int | float) and epsilon_budget > 0 and math.isfinite(epsilon_budget)):
        raise LedgerError(f"The ε budget must be a positive number, not {epsilon_budget!r}.")
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise LedgerError(f"δ must be strictly between 0 and 1, not {delta!r}.")
    if accountant not in ACCOUNTANTS:
        raise LedgerError(f"Unknown accountant {accountant!r}; use one of {', '.join(ACCOUNTANTS)}.")
    if not (isinstance(min_noise, int | float) and min_noise >= 0 and math.isfinite(min_noise)):
        raise LedgerError(f"The minimum noise multiplier must be 0 or more, not {min_noise!r}.")


def atomic_write_json(path: Path, data: object) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1) + "\n")
