"""The Flower ServerApp: FedAvg over the devices' global adapters, one stored version per round.

A run starts from the newest version in ``<server-state-dir>/adapters`` (creating v0, the
untrained adapter, on the very first run), so a restarted server resumes where it stopped. Each
round that aggregates at least one device writes version N+1 before the next round begins;
devices that refuse (not eligible, budget spent) or drop out are left out of that round's average.

Run config keys read here (besides `federation.task.TaskConfig`'s):

    server-state-dir   where versions and the run log live (required)
    num-server-rounds  rounds in this run (default 1)
    min-clients        devices needed before a round starts, and per round (default 2)
    fraction-train     share of connected devices sampled per round (default 1.0)
    fraction-evaluate  share sampled to receive the new version and evaluate (default 1.0)
    round-timeout      seconds to wait for replies before aggregating what arrived (default 3600)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from federation.adapters import AdapterError
from federation.store import AdapterStore
from federation.task import GLOBAL, SpecialistWithAdapters, TaskConfig
from sdk.errors import ConfigError
from sdk.models import load_causal_lm

__all__ = ["ServerSettings", "VersionedFedAvg", "app", "ensure_initial_version", "run_federation"]

RUN_LOG = "runs.jsonl"


@dataclass(frozen=True)
class ServerSettings:
    state_dir: Path
    rounds: int = 1
    min_clients: int = 2
    fraction_train: float = 1.0
    fraction_evaluate: float = 1.0
    round_timeout: float = 3600.0

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
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid server setting in the run config: {exc}.") from None
        if settings.rounds < 1 or settings.min_clients < 1 or settings.round_timeout <= 0:
            raise ConfigError("num-server-rounds, min-clients and round-timeout must be positive.")
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
    train_metrics: dict[str, float] = field(default_factory=dict)
    eval_metrics: dict[str, float] = field(default_factory=dict)


class VersionedFedAvg(FedAvg):
    """FedAvg that tags every message with the adapter version it carries and stores each new one."""

    def __init__(
        self,
        *,
        store: AdapterStore,
        version: int,
        lora_config: dict[str, Any],
        base: str,
        run_id: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(weighted_by_key="weight", **kwargs)
        self.store = store
        self.version = version
        self.lora_config = lora_config
        self.base = base
        self.run_id = run_id
        self.rounds: list[RoundRecord] = []

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        config["adapter-version"] = self.version
        self.rounds.append(RoundRecord(server_round=server_round, version_in=self.version))
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        record = self.rounds[-1]
        record.replies = sum(1 for m in replies if not m.has_error())
        record.refusals = [m.error.reason for m in replies if m.has_error()]
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None:
            new = self.version + 1
            tensors = {key: value.numpy() for key, value in arrays.items()}
            self.store.save(
                new,
                tensors,
                self.lora_config,
                base=self.base,
                extra={
                    "parent_version": self.version,
                    "run_id": self.run_id,
                    "server_round": server_round,
                    "devices": record.replies,
                    "mean_epsilon": float(metrics["epsilon"]) if metrics and "epsilon" in metrics else None,
                },
            )
            self.version = new
            record.version_out = new
        if metrics is not None:
            record.train_metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        return arrays, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        config["adapter-version"] = self.version
        return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        metrics = super().aggregate_evaluate(server_round, replies)
        if metrics is not None and self.rounds:
            self.rounds[-1].eval_metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        return metrics


def ensure_initial_version(settings: ServerSettings, cfg: TaskConfig) -> int:
    """The newest stored version, creating v0 (the untrained global adapter) if there is none."""
    store = AdapterStore(settings.adapters_dir)
    latest = store.latest()
    if latest is not None:
        stored = store.get(latest).path / "adapter_config.json"
        config = json.loads(stored.read_text(encoding="utf-8"))
        if int(config.get("r", -1)) != cfg.lora_rank or sorted(config.get("target_modules") or []) != sorted(
            cfg.targets
        ):
            raise AdapterError(
                f"The stored global adapter v{latest} has rank {config.get('r')} on "
                f"{config.get('target_modules')}, but this run asks for rank {cfg.lora_rank} on {cfg.targets}; "
                "use a new server-state-dir for a different adapter shape."
            )
        return latest
    sw = SpecialistWithAdapters(load_causal_lm(cfg.model, progress=False), cfg)
    store.save(
        0,
        sw.get_adapter(GLOBAL),
        sw.lora_config_dict(),
        base=sw.fingerprint,
        extra={"model": cfg.model, "seed": cfg.seed},
    )
    return 0


def run_federation(grid: Grid, run_config: Mapping[str, Any], *, run_id: int = 0) -> dict[str, Any]:
    """Run the configured rounds on `grid`; returns (and appends to the run log) a summary."""
    cfg = TaskConfig.from_run_config(run_config)
    settings = ServerSettings.from_run_config(run_config)
    store = AdapterStore(settings.adapters_dir)
    start = ensure_initial_version(settings, cfg)
    first = store.get(start)
    lora_config = json.loads((first.path / "adapter_config.json").read_text(encoding="utf-8"))
    strategy = VersionedFedAvg(
        store=store,
        version=start,
        lora_config=lora_config,
        base=first.base,
        run_id=run_id,
        fraction_train=settings.fraction_train,
        fraction_evaluate=settings.fraction_evaluate,
        min_train_nodes=settings.min_clients,
        min_evaluate_nodes=settings.min_clients if settings.fraction_evaluate > 0 else 0,
        min_available_nodes=settings.min_clients,
    )
    arrays = ArrayRecord({key: Array(value) for key, value in store.arrays(start).items()})
    began = time.time()
    strategy.start(
        grid=grid,
        initial_arrays=arrays,
        num_rounds=settings.rounds,
        timeout=settings.round_timeout,
        train_config=ConfigRecord({"adapter-version": start}),
        evaluate_config=ConfigRecord({"adapter-version": start}),
    )
    summary = {
        "run_id": run_id,
        "started": began,
        "seconds": time.time() - began,
        "version_in": start,
        "version_out": strategy.version,
        "rounds": [r.__dict__ for r in strategy.rounds],
    }
    _append_run_log(settings.state_dir / RUN_LOG, summary)
    return summary


def _append_run_log(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(summary) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    run_federation(grid, context.run_config, run_id=context.run_id)
