"""The device's ε ledger format: one parser, one writer, and the ε it adds up to.

A ledger is one JSON object per device (written by `federation.budget_ledger.Ledger`, read by
`privacy budget` and by the device itself)::

    {"format": 1, "epsilon_budget": float, "delta": float, "accountant": "rdp"|"prv",
     "epsilon_spent": float, "history": [[noise, sample_rate, steps], ...], "rounds": [{...}],
     "refusals": int, "policy": {"dp_required": bool, "min_noise_multiplier": float},
     "seal": {"id": str, "seq": int}}

Budget, δ, accountant and ``policy`` are the device's DP policy, fixed when the ledger is
created. ``history`` is the accountant's full composition history so that ε is always recomputed
(`epsilon_of`), never trusted from the stored total. ``policy`` is absent from ledgers written
before the device enforced its policy; such ledgers read as DP-required with no noise floor.

A device whose history is sealed keeps its ledger sealed too (`federation.budget_ledger`): the file is a
vault (`privacy.vault`, AES-256-GCM with the history's key) holding this object, whose ``seal``
names the ledger (a random id) and counts its writes, checked against a sealed counter beside it
so that a ledger rolled back or swapped is refused. `read_ledger_file` opens a sealed ledger with
the key it is given, else the environment's (as `privacy budget` does); only plaintext ledgers
have no ``seal``.

Only `core` is imported; Opacus (the accountant) is imported when ε is computed, and the vault
when a sealed ledger is read.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsteer.privacy.errors import LedgerError

__all__ = [
    "ACCOUNTANTS",
    "LEDGER_FILE",
    "LEDGER_FORMAT",
    "MAX_STEPS",
    "MIN_NOISE_MULTIPLIER",
    "LedgerData",
    "LedgerError",
    "epsilon_of",
    "ledger_json",
    "parse_ledger",
    "read_ledger_file",
]

LEDGER_FORMAT = 1
LEDGER_FILE = "ledger.json"
ACCOUNTANTS = ("rdp", "prv")
# What the accountants can compute: below σ 0.1 Opacus's PRV accountant fails (σ 0.01: a
# RuntimeError) and RDP divides by zero (σ 1e-300); 10^8 steps made PRV ask for 735 TiB. A device
# takes at most max-dp-steps (64 by default) a round, so 10^6 steps is some 15,000 rounds.
MIN_NOISE_MULTIPLIER = 0.1
MAX_STEPS = 10**6

History = list[tuple[float, float, int]]


@dataclass
class LedgerData:
    """A parsed ledger: the device's policy, its composition history and what it recorded."""

    epsilon_budget: float
    delta: float
    accountant: str
    history: History = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    refusals: int = 0
    epsilon_stored: float = 0.0
    dp_required: bool = True
    min_noise_multiplier: float = 0.0
    policy_recorded: bool = True  # False: written before the device enforced a policy
    seal_id: str | None = None  # a sealed ledger's id (None: a plaintext ledger)
    seal_seq: int = 0  # a sealed ledger's count of writes


def epsilon_of(history: History, delta: float, accountant: str = "rdp") -> float:
    """Total ε at `delta` of a DP-SGD composition history, with Opacus's accountant.

    Never negative: at a large δ the PRV accountant returns ε < 0 (-0.20 for two steps at σ = 1,
    q = 1/6, δ = 0.2), which `parse_ledger` rightly refuses, so a ledger saved with it could never
    be read again. δ(ε) falls as ε grows, so a mechanism that is (ε, δ)-DP for some ε < 0 is also
    (0, δ)-DP: 0 is a true (and the least meaningful) figure.
    """
    if accountant not in ACCOUNTANTS:
        raise LedgerError(f"Unknown accountant {accountant!r}; use one of {', '.join(ACCOUNTANTS)}.")
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise LedgerError(f"δ must be strictly between 0 and 1, not {delta!r}.")
    if any(not float(s) >= MIN_NOISE_MULTIPLIER for s, _, _ in history):
        raise LedgerError(f"A noise multiplier below {MIN_NOISE_MULTIPLIER:g} gives no ε the accountant can compute.")
    if sum(int(n) for _, _, n in history) > MAX_STEPS:
        raise LedgerError(f"A history of more than {MAX_STEPS} DP-SGD steps gives no ε the accountant can compute.")
    # Composing n steps of one mechanism then m more is n + m steps of it, for both accountants: so
    # entries with the same (σ, q) are merged (one a round, never merged, made PRV take 208 s for
    # 200 rounds, 5.3 s merged, the same ε), in one canonical order, and steps of 0 dropped.
    merged: dict[tuple[float, float], int] = {}
    for s, q, n in history:
        if int(n):
            merged[(float(s), float(q))] = merged.get((float(s), float(q)), 0) + int(n)
    if not merged:
        return 0.0
    key = tuple(sorted((s, q, n) for (s, q), n in merged.items()))
    try:
        return max(0.0, _epsilon_cached(key, float(delta), accountant))
    except LedgerError:
        raise
    except (ArithmeticError, MemoryError, RuntimeError, ValueError) as exc:
        # Every caller (the device's budget check, `privacy budget`) gets one sentence, and a device
        # whose ε cannot be computed trains no more (it is over any budget).
        raise LedgerError(
            f"the {accountant} accountant cannot compute the ε of this history ({type(exc).__name__})."
        ) from None


def _opacus_accountants() -> Any:
    # Recomputing ε is a federation task: Opacus comes with the [federation] extra, and the
    # device SDK's base install (which only reads ledgers) does not need it.
    try:
        from opacus import accountants
        from opacus.accountants.analysis import rdp
    except ImportError:
        raise LedgerError(
            "recomputing ε needs Opacus, which comes with the federation extra: pip install 'specsteer-sdk[federation]'"
        ) from None
    return accountants, rdp


@functools.lru_cache(maxsize=256)
def _epsilon_cached(history: tuple[tuple[float, float, int], ...], delta: float, accountant: str) -> float:
    accountants, rdp_analysis = _opacus_accountants()
    if accountant == "prv":
        acc = accountants.PRVAccountant()
        acc.history = list(history)
        return float(acc.get_epsilon(delta=delta))
    # Opacus's RDPAccountant recomputes every entry's RDP curve on each call (about a second of
    # pure Python); the curve of n steps is n times the one-step curve, so compute that once per
    # (σ, q) and sum. The result is exactly Opacus's: same orders, same conversion to (ε, δ).
    total = sum(np.asarray(_rdp_one_step(sigma, q)) * steps for sigma, q, steps in history)
    eps, _ = rdp_analysis.get_privacy_spent(orders=accountants.RDPAccountant.DEFAULT_ALPHAS, rdp=total, delta=delta)
    return float(eps)


@functools.lru_cache(maxsize=64)
def _rdp_one_step(noise_multiplier: float, sample_rate: float) -> tuple[float, ...]:
    accountants, rdp_analysis = _opacus_accountants()
    curve = rdp_analysis.compute_rdp(
        q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=accountants.RDPAccountant.DEFAULT_ALPHAS
    )
    return tuple(float(x) for x in np.atleast_1d(curve))


def parse_ledger(data: object, source: str) -> LedgerData:
    """A ledger object checked field by field; `LedgerError` names the first damaged field."""

    def bad(what: str) -> LedgerError:
        return LedgerError(f"the privacy ledger {source} is damaged: {what}")

    if not isinstance(data, dict):
        raise bad("it is not a JSON object")
    if data.get("format") != LEDGER_FORMAT:
        raise bad(f"format {data.get('format')!r}, expected {LEDGER_FORMAT}")

    def number(name: str, *, lo: float = 0.0) -> float:
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < lo:
            raise bad(f"{name} is {value!r}")
        return float(value)

    budget = number("epsilon_budget")
    delta = number("delta")
    if not 0 < delta < 1:  # δ >= 1 allows anything at ε 0 (δ = 5 read as ε 0.000)
        raise bad(f"delta is {delta!r}, not strictly between 0 and 1")
    stored = number("epsilon_spent")
    accountant = data.get("accountant")
    if accountant not in ACCOUNTANTS:
        raise bad(f"unknown accountant {accountant!r}")
    history_raw, rounds = data.get("history"), data.get("rounds")
    if not isinstance(history_raw, list) or not isinstance(rounds, list):
        raise bad("history or rounds is not a list")
    history: History = []
    for h in history_raw:
        numbers = isinstance(h, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in h)
        if not (numbers and len(h) == 3):
            raise bad("a history entry is not [noise, sample_rate, steps]")
        noise, rate, steps = h
        # What the accountant can take: negative steps would give budget back, a NaN hangs it.
        ok = math.isfinite(noise) and noise >= MIN_NOISE_MULTIPLIER and math.isfinite(rate) and 0 < rate <= 1
        if not ok:
            raise bad(
                f"a history entry {h!r} has a noise multiplier (at least {MIN_NOISE_MULTIPLIER:g}) "
                "or sample rate out of range"
            )
        if not (math.isfinite(steps) and float(steps).is_integer() and 0 <= steps <= MAX_STEPS):
            raise bad(f"a history entry {h!r} has a step count that is no whole number from 0 to {MAX_STEPS}")
        history.append((float(noise), float(rate), int(steps)))
    if sum(n for _, _, n in history) > MAX_STEPS:
        raise bad(f"its history holds more than {MAX_STEPS} DP-SGD steps")
    if not all(isinstance(r, dict) for r in rounds):
        raise bad("a round entry is not an object")
    refusals = data.get("refusals", 0)
    if isinstance(refusals, bool) or not isinstance(refusals, int) or refusals < 0:
        raise bad(f"refusals is {refusals!r}")
    policy = data.get("policy")
    recorded = policy is not None
    policy = {} if policy is None else policy
    if not isinstance(policy, dict):
        raise bad("policy is not an object")
    required = policy.get("dp_required", True)
    floor = policy.get("min_noise_multiplier", 0.0)
    if not isinstance(required, bool):
        raise bad(f"policy.dp_required is {required!r}")
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not math.isfinite(floor) or floor < 0:
        raise bad(f"policy.min_noise_multiplier is {floor!r}")
    seal = data.get("seal")
    seal_id: str | None = None
    seal_seq = 0
    if seal is not None:
        if not isinstance(seal, dict):
            raise bad("seal is not an object")
        sid, seq = seal.get("id"), seal.get("seq")
        if not isinstance(sid, str) or isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise bad("seal is not an id and a count of writes")
        seal_id, seal_seq = sid, seq
    return LedgerData(
        epsilon_budget=budget,
        delta=delta,
        accountant=str(accountant),
        history=history,
        rounds=[dict(r) for r in rounds],
        refusals=refusals,
        epsilon_stored=stored,
        dp_required=required,
        min_noise_multiplier=float(floor),
        policy_recorded=recorded,
        seal_id=seal_id,
        seal_seq=seal_seq,
    )


def read_ledger_file(path: Path, key_provider: Any = None) -> LedgerData | None:
    """The ledger at `path`, or None if there is none; unreadable or damaged is a `LedgerError`.

    A sealed ledger is opened with `key_provider` (a `privacy.vault.KeyProvider`), or with the
    environment's key when none is given; one that fails authentication is a `LedgerError`.
    """
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise LedgerError(f"cannot read the privacy ledger {path}: {reason}") from None
    from specsteer.privacy import vault

    if blob.startswith(vault.MAGIC):
        blob = _unseal(path, key_provider)
    try:
        data = json.loads(blob.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise LedgerError(f"cannot read the privacy ledger {path}: {exc}") from None
    return parse_ledger(data, str(path))


def _unseal(path: Path, key_provider: Any) -> bytes:
    from specsteer.core.errors import ProfileError
    from specsteer.privacy import vault

    try:
        provider = key_provider or vault.environment_key_provider(f"the privacy ledger {path} is sealed")
        return vault.ProfileVault.open(path, provider)
    except ProfileError as exc:  # no key in the environment
        raise LedgerError(str(exc)) from None
    except vault.VaultError as exc:
        raise LedgerError(f"cannot open the sealed privacy ledger {path}: {exc}") from None


def ledger_json(ledger: LedgerData) -> dict[str, Any]:
    """The ledger as the JSON object `parse_ledger` reads (ε recomputed from the history).

    An ε the parser would refuse (not a finite number) is a `LedgerError` here, before anything is
    written: a saved ledger its own parser cannot read is a device that can never train again.
    """
    spent = epsilon_of(ledger.history, ledger.delta, ledger.accountant)
    if not math.isfinite(spent):
        raise LedgerError(f"the ε of this history is {spent!r}, which no ledger can record")
    return {
        "format": LEDGER_FORMAT,
        "epsilon_budget": ledger.epsilon_budget,
        "delta": ledger.delta,
        "accountant": ledger.accountant,
        "epsilon_spent": spent,
        "history": [list(h) for h in ledger.history],
        "rounds": list(ledger.rounds),
        "refusals": ledger.refusals,
        "policy": {"dp_required": ledger.dp_required, "min_noise_multiplier": ledger.min_noise_multiplier},
        **({"seal": {"id": ledger.seal_id, "seq": ledger.seal_seq}} if ledger.seal_id is not None else {}),
    }
