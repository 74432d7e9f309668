"""What both server workflows share: the run's settings, one round's record, and versioning.

`federation.server_app.VersionedFedAvg` (Flower's Message API) and
`federation.secagg.VersionedSecAggFedAvg` (Flower's legacy workflow, as SecAgg+ requires) differ
only in the Flower API they speak. Both open a `RoundRecord` per round, tag messages with the
adapter version they carry, and store each aggregate as version N+1; that bookkeeping is
`VersionedRounds`, here, so neither module imports the other.

Each round says when it starts and when it ends (INFO on the logger `specsteer.federation.rounds`);
the end's record carries the round's `RoundRecord` as `round_record` (and `run_id`, `rounds`), so
a command line can print the round in its own words as it ends (`federation.cli`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsteer.core.errors import ConfigError
from specsteer.federation.attempts import TOKEN_KEY, publishing
from specsteer.federation.store import AdapterStore

__all__ = ["RUN_LOG", "RoundRecord", "ServerSettings", "VersionedRounds"]

RUN_LOG = "runs.jsonl"
log = logging.getLogger("specsteer.federation.rounds")
SECAGG_LEAST_THRESHOLD = 0.625


@dataclass(frozen=True)
class ServerSettings:
    state_dir: Path
    rounds: int = 1
    min_clients: int = 2
    fraction_train: float = 1.0
    fraction_evaluate: float = 1.0
    round_timeout: float = 3600.0
    secagg: bool = False
    secagg_shares: float = 1.0  # SecAgg+ num_shares as a share of the sampled devices
    secagg_threshold: float = 0.67  # shares needed to reconstruct a dropped device's mask
    attempt_token: str | None = None  # a scheduled attempt's right to publish (federation.attempts)

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> ServerSettings:
        if not str(config.get("server-state-dir", "")).strip():
            raise ConfigError("The run config has no server-state-dir: the server needs a folder for its versions.")
        try:
            settings = cls(
                state_dir=Path(str(config["server-state-dir"])).expanduser(),
                rounds=int(config.get("num-server-rounds", 1)),
                min_clients=int(config.get("min-clients", 2)),
                fraction_train=float(config.get("fraction-train", 1.0)),
                fraction_evaluate=float(config.get("fraction-evaluate", 1.0)),
                round_timeout=float(config.get("round-timeout", 3600.0)),
                secagg=str(config.get("secagg", False)).lower() in ("1", "true"),
                secagg_shares=float(config.get("secagg-shares", 1.0)),
                secagg_threshold=float(config.get("secagg-threshold", 0.67)),
                attempt_token=str(config[TOKEN_KEY]) if config.get(TOKEN_KEY) not in (None, "") else None,
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid server setting in the run config: {exc}.") from None
        if settings.rounds < 1 or settings.min_clients < 1 or settings.round_timeout <= 0:
            raise ConfigError("num-server-rounds, min-clients and round-timeout must be positive.")
        if settings.secagg and not SECAGG_LEAST_THRESHOLD < settings.secagg_threshold <= 1:
            # Flower rounds threshold x shares half to even (0.625 x 4 shares = 2): above 0.625 it is
            # more than half the shares for every cohort, which devices require (federation.secagg_terms).
            raise ConfigError(
                f"secagg-threshold must be above {SECAGG_LEAST_THRESHOLD} and at most 1: devices refuse a "
                "threshold of half the shares or fewer."
            )
        return settings

    @property
    def adapters_dir(self) -> Path:
        return self.state_dir / "adapters"


@dataclass
class RoundRecord:
    server_round: int
    version_in: int
    version_out: int | None = None
    replies: int = 0
    refusals: list[str] = field(default_factory=list)
    train_metrics: dict[str, float | None] = field(default_factory=dict)
    eval_metrics: dict[str, float | None] = field(default_factory=dict)


class VersionedRounds:
    """A strategy's version counter and round log; mixed into both FedAvg variants."""

    def _init_versions(
        self,
        *,
        store: AdapterStore,
        version: int,
        lora_config: dict[str, Any],
        base: str,
        run_id: int,
        settings: ServerSettings | None = None,
    ) -> None:
        self.store = store
        # A scheduled attempt publishes only while it holds the lease (federation.attempts).
        self.state_dir = settings.state_dir if settings is not None else store.root.parent
        self.attempt_token = settings.attempt_token if settings is not None else None
        self.version = version
        self.lora_config = lora_config
        self.base = base
        self.run_id = run_id
        self.total_rounds = settings.rounds if settings is not None else None
        self.rounds: list[RoundRecord] = []

    def _round_name(self, server_round: int) -> str:
        return f"round {server_round}" + (f" of {self.total_rounds}" if self.total_rounds is not None else "")

    def open_round(self, server_round: int) -> RoundRecord:
        """Start the record of `server_round`, which trains from the current version."""
        record = RoundRecord(server_round=server_round, version_in=self.version)
        self.rounds.append(record)
        log.info("%s: sending v%d to the devices", self._round_name(server_round), self.version)
        return record

    def end_round(self, record: RoundRecord) -> None:
        """Say that a round's training ended: what came back, the version it made, the devices' ε."""
        parts = [f"{record.replies} device(s) sent an update"]
        if record.refusals:
            parts.append(f"{len(record.refusals)} refused or failed")
        parts.append(f"v{record.version_out}" if record.version_out is not None else "no new version")
        epsilon = record.train_metrics.get("epsilon")
        if epsilon is not None:
            parts.append(f"mean device ε {epsilon:.3f}")
        log.info(
            "%s: %s",
            self._round_name(record.server_round),
            ", ".join(parts),
            extra={"round_record": record, "run_id": self.run_id, "rounds": self.total_rounds},
        )

    def version_config(self, server_round: int) -> dict[str, int | str]:
        """What every message of a round carries: the version its arrays are, the round, and the
        base model's fingerprint (a device refuses arrays made for another base before it keeps them)."""
        return {"adapter-version": self.version, "server-round": server_round, "base-fingerprint": self.base}

    def save_version(
        self, server_round: int, tensors: Mapping[str, np.ndarray], *, devices: int, extra: Mapping[str, Any]
    ) -> int:
        """Store an aggregate as the next version (before the next round starts); returns it."""
        new = self.version + 1
        with publishing(self.state_dir, self.attempt_token, f"v{new}"):
            self.store.save(
                new,
                tensors,
                self.lora_config,
                base=self.base,
                extra={
                    "parent_version": self.version,
                    "run_id": self.run_id,
                    "server_round": server_round,
                    "devices": devices,
                    **extra,
                },
            )
        self.version = new
        if self.rounds:
            self.rounds[-1].version_out = new
        return new
