"""The device's privacy ledger: every DP-SGD step it ever took, and the ε that adds up to.

One JSON file per device, kept in the device's state folder, in the format of `privacy.accounting`
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

Sealed (`Ledger.load(..., key_provider=...)`, a device whose history is sealed; `federation.atrest`):
the ledger is a vault (AES-256-GCM with the history's key, as the personal adapter and the round
log), so it can be neither read nor edited without the key, and it names itself (a random id) and
counts its writes. A sealed counter beside it (``ledger.json.seq``: the id and the count) is
written after each write of the ledger, so at every moment the ledger's count is the counter's or
one more (a crash between the two). On every load, under the lock, a ledger whose count is below
the counter's (rolled back to an older copy), whose id is another's, that is missing or in
plaintext while the counter says writes were made, or that is sealed with no counter beside it is
a `LedgerError`: the device refuses to train rather than trust it. A plaintext ledger with no
counter (written before ledgers were sealed) is read once and sealed at its next write. What no
file on the device can detect is the ledger and its counter rolled back together (a copy of the
whole state folder put back): that needs a monotonic counter outside the folder (a TPM, the OS's
keystore). An app that has one passes it as ``Ledger.load(..., counter=...)``: any `WriteCounter`
(read the id and count, write them; the platform's storage must refuse a count lower than the
one it holds); `SealedFileCounter`, the file beside the ledger, is the default.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from specsteer.core.fileio import atomic_write
from specsteer.federation.errors import BudgetExhausted
from specsteer.privacy.accounting import ACCOUNTANTS, LedgerData, LedgerError, epsilon_of, ledger_json, read_ledger_file
from specsteer.privacy.errors import VaultError
from specsteer.privacy.vault import KeyProvider, ProfileVault, is_vault

__all__ = [
    "ACCOUNTANTS",
    "BudgetExhausted",
    "Ledger",
    "LedgerError",
    "RoundEntry",
    "SealedFileCounter",
    "WriteCounter",
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
    # Sealed: the key (None: a plaintext ledger), the ledger's id and its count of writes.
    key_provider: KeyProvider | None = field(default=None, repr=False, compare=False)
    seal_id: str | None = None
    seal_seq: int = 0
    # Where a sealed ledger's count of writes is kept (None: `SealedFileCounter`, beside it).
    counter: WriteCounter | None = field(default=None, repr=False, compare=False)
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
        key_provider: KeyProvider | None = None,
        counter: WriteCounter | None = None,
    ) -> Ledger:
        """The ledger at `path`; a missing file is an empty ledger (nothing spent) with this policy.

        An existing ledger keeps the policy it was created with: asking for another is a `LedgerError`.
        `dp_required` and `min_noise_multiplier` left at None accept what the ledger fixed (a new
        ledger: DP required, no noise floor). With `key_provider` the ledger is sealed (module
        docstring) and one that does not verify is a `LedgerError`; `counter` keeps its count of
        writes (default: a sealed file beside it), e.g. in the platform's secure storage.
        """
        _check_budget(epsilon_budget, delta, accountant, min_noise_multiplier or 0.0)
        ledger = cls(
            path=Path(path),
            epsilon_budget=float(epsilon_budget),
            delta=float(delta),
            accountant=accountant,
            dp_required=True if dp_required is None else bool(dp_required),
            min_noise_multiplier=0.0 if min_noise_multiplier is None else float(min_noise_multiplier),
            key_provider=key_provider,
            counter=counter,
        )
        strict = (dp_required is not None, min_noise_multiplier is not None)
        if key_provider is not None and ledger.path.parent.is_dir():
            with ledger.hold(strict=strict):  # the ledger and its counter read as one
                pass
        else:
            ledger._reload(strict=strict)
        return ledger

    @property
    def counter_path(self) -> Path:
        """A sealed ledger's counter of writes, beside it."""
        return self.path.with_name(self.path.name + ".seq")

    def _reload(self, *, strict: tuple[bool, bool] | None = None) -> None:
        data = self._read_verified()
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
        self.seal_id, self.seal_seq = data.seal_id, data.seal_seq

    def _read_verified(self) -> LedgerData | None:
        """The ledger on disk; sealed, checked against its counter (module docstring)."""
        where = f"The device's privacy ledger {self.path}"
        if self.key_provider is None:
            if is_vault(self.path) or (self.counter is None and self.counter_path.exists()):
                raise LedgerError(f"{where} is sealed but the device's history no longer is; it cannot be trusted.")
            return read_ledger_file(self.path)
        counter = self._read_counter()
        sealed = is_vault(self.path)
        data = read_ledger_file(self.path, self.key_provider)
        if data is not None and not sealed:
            data.seal_id, data.seal_seq = None, 0  # a plaintext ledger's own say carries no weight
        if counter is None:
            if sealed:
                raise LedgerError(f"{where} has lost its counter of writes; it cannot be trusted.")
            return data  # none yet, or a plaintext ledger from before ledgers were sealed
        seal_id, seq = counter
        if data is None or not sealed:
            if seq == 0:  # created, never written: nothing was spent
                return data
            state = "missing" if data is None else "in plaintext"
            raise LedgerError(f"{where} is {state}, but {seq} sealed write(s) were made; it cannot be trusted.")
        if data.seal_id != seal_id:
            raise LedgerError(
                f"{where} is not the one this device wrote (another ledger's copy); it cannot be trusted."
            )
        if data.seal_seq < seq:
            raise LedgerError(
                f"{where} was rolled back: it holds write {data.seal_seq} of {seq}; it cannot be trusted."
            )
        return data

    def _counter(self) -> WriteCounter:
        if self.counter is not None:
            return self.counter
        assert self.key_provider is not None
        return SealedFileCounter(self.counter_path, self.key_provider)

    def _read_counter(self) -> tuple[str, int] | None:
        return self._counter().read()

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
    def hold(self, *, strict: tuple[bool, bool] | None = None) -> Iterator[Ledger]:
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
            self._reload(strict=strict)
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

    def affordable_steps(
        self, noise_multiplier: float, sample_rate: float, most: int, *, per_round: float = math.inf
    ) -> int:
        """The most DP-SGD steps, up to `most`, that one more round can take within the budget (0: none),
        adding at most `per_round` to the ε spent (the device's ``max-epsilon-per-round``)."""
        if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
            raise LedgerError(f"The noise multiplier must be a positive number, not {noise_multiplier!r}.")
        if not per_round > 0:  # NaN too
            return 0
        ceiling = min(self.epsilon_budget, self.epsilon_spent + per_round)
        low, high = 0, max(0, int(most))
        # ε grows with the number of steps, so the largest affordable count is found by bisection.
        while low < high:
            mid = (low + high + 1) // 2
            if self.project(noise_multiplier, sample_rate, mid) <= ceiling:  # False for NaN
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
            seal_id=self.seal_id,
            seal_seq=self.seal_seq,
        )

    def as_dict(self) -> dict[str, Any]:
        return ledger_json(self.data())

    def save(self) -> None:
        with self.hold():
            provider = self.key_provider
            if provider is None:
                atomic_write_json(self.path, self.as_dict())
                return
            if self.seal_id is None:  # the first sealed write (of a new ledger, or of a plaintext one)
                self.seal_id, self.seal_seq = secrets.token_hex(16), 0
                self._write_counter(provider)
            self.seal_seq += 1
            text = json.dumps(self.as_dict(), indent=1) + "\n"
            try:
                # The ledger first, then its counter: a crash between leaves the ledger one write ahead.
                ProfileVault.seal(text.encode("utf-8"), self.path, provider)
            except VaultError as exc:
                raise LedgerError(f"Cannot write the sealed privacy ledger {self.path}: {exc}.") from None
            self._write_counter(provider)

    def _write_counter(self, provider: KeyProvider) -> None:
        assert self.seal_id is not None
        self._counter().write(self.seal_id, self.seal_seq)


@runtime_checkable
class WriteCounter(Protocol):
    """A sealed ledger's count of writes: its id and the count (module docstring).

    Kept outside the state folder (the platform's secure storage, a TPM), it also detects the ledger
    and the counter rolled back together. `write` must be durable before it returns, and a
    platform-backed one must refuse (raise `LedgerError`) a count below the one it holds.
    """

    def read(self) -> tuple[str, int] | None:
        """The id and count last written, or None if none ever was."""
        ...

    def write(self, seal_id: str, seq: int) -> None: ...


@dataclass(frozen=True)
class SealedFileCounter:
    """The default `WriteCounter`: a file sealed with the history's key, beside the ledger."""

    path: Path
    key_provider: KeyProvider = field(repr=False)

    def read(self) -> tuple[str, int] | None:
        if not self.path.exists():
            return None
        try:
            counter = json.loads(ProfileVault.open(self.path, self.key_provider).decode("utf-8"))
        except (VaultError, ValueError) as exc:
            raise LedgerError(f"The privacy ledger's counter {self.path} does not verify: {exc}.") from None
        seal_id, seq = counter.get("id") if isinstance(counter, dict) else None, None
        if isinstance(counter, dict):
            seq = counter.get("seq")
        if not isinstance(seal_id, str) or isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise LedgerError(f"The privacy ledger's counter {self.path} is damaged.")
        return seal_id, seq

    def write(self, seal_id: str, seq: int) -> None:
        counter = json.dumps({"id": seal_id, "seq": seq}).encode("utf-8")
        try:
            ProfileVault.seal(counter, self.path, self.key_provider)
        except VaultError as exc:
            raise LedgerError(f"Cannot write the privacy ledger's counter {self.path}: {exc}.") from None


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
