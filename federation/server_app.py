"""The Flower ServerApp: FedAvg over the devices' global adapters, one stored version per round.

A run starts from the newest version in ``<server-state-dir>/adapters`` (creating v0, the
untrained adapter, on the very first run), so a restarted server resumes where it stopped. Each
round that aggregates at least one device writes version N+1 before the next round begins;
devices that refuse (not eligible, budget spent) or drop out are left out of that round's average.

Run config keys read here (besides `federation.task.TaskConfig`'s):

    server-state-dir   where versions and the run log live (required)
    num-server-rounds  rounds in this run (default 1)
    min-clients        devices to wait for (at most round-timeout) before a round trains (default 2)
    fraction-train     share of connected devices sampled per round (default 1.0)
    fraction-evaluate  share sampled to receive the new version and evaluate (default 1.0)
    round-timeout      seconds to wait for replies before aggregating what arrived (default 3600)
    secagg             true: Flower's SecAgg+ (legacy workflow, federation/secagg.py), the server
                       sees only the sum of the devices' adapters (default false)
    secagg-shares, secagg-threshold   SecAgg+ shares and reconstruction threshold (fractions)
    attempt-token      set by `federation schedule`: the run publishes only while this attempt holds
                       the lease in server-state-dir (federation.attempts); a timed-out one cannot
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from specsteer.core.fileio import append_line
from specsteer.core.models import load_causal_lm
from specsteer.federation.adapters import AdapterError
from specsteer.federation.attempts import publishing
from specsteer.federation.offline import go_offline
from specsteer.federation.rounds import RUN_LOG, RoundRecord, ServerSettings, VersionedRounds
from specsteer.federation.store import AdapterStore
from specsteer.federation.task import GLOBAL, SpecialistWithAdapters, TaskConfig

__all__ = [
    "RUN_LOG",
    "RoundRecord",
    "ServerSettings",
    "VersionedFedAvg",
    "app",
    "ensure_initial_version",
    "run_federation",
]


class VersionedFedAvg(VersionedRounds, FedAvg):
    """FedAvg that tags every message with the adapter version it carries and stores each new one."""

    def __init__(
        self,
        *,
        store: AdapterStore,
        version: int,
        lora_config: dict[str, Any],
        base: str,
        run_id: int,
        wait_for_nodes: float = 3600.0,
        settings: ServerSettings | None = None,
        **kwargs: Any,
    ) -> None:
        FedAvg.__init__(self, weighted_by_key="weight", **kwargs)
        self._init_versions(
            store=store, version=version, lora_config=lora_config, base=base, run_id=run_id, settings=settings
        )
        self.wait_for_nodes = wait_for_nodes

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.open_round(server_round)
        # Flower's sampler waits forever for min_available_nodes; a device lost in an earlier round
        # would then stall the run. Wait at most one round timeout, then train with who is there.
        nodes = self._sample(grid, self.fraction_train, self.min_train_nodes, wait=self.wait_for_nodes)
        if not nodes:
            return []
        config.update(self.version_config(server_round))
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, nodes, MessageType.TRAIN)

    def _sample(self, grid: Grid, fraction: float, minimum: int, *, wait: float) -> list[int]:
        if fraction == 0.0:
            return []
        deadline = time.time() + wait
        nodes = list(grid.get_node_ids())
        while len(nodes) < minimum and time.time() < deadline:
            time.sleep(1.0)
            nodes = list(grid.get_node_ids())
        size = min(len(nodes), max(int(len(nodes) * fraction), minimum))
        return random.sample(nodes, size)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        record = self.rounds[-1]
        record.replies = sum(1 for m in replies if not m.has_error())
        record.refusals = [m.error.reason or f"error code {m.error.code}" for m in replies if m.has_error()]
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None:
            tensors = {key: value.numpy() for key, value in arrays.items()}
            self.save_version(server_round, tensors, devices=record.replies, extra={})
        if metrics is not None:
            record.train_metrics = {k: _finite(v) for k, v in metrics.items()}
        self.end_round(record)
        return arrays, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        # Hand the new version to whoever is connected now; never wait for devices that dropped out.
        nodes = self._sample(grid, self.fraction_evaluate, 1, wait=0.0)
        if not nodes:
            return []
        config.update(self.version_config(server_round))
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, nodes, MessageType.EVALUATE)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        metrics = super().aggregate_evaluate(server_round, replies)
        if metrics is not None and self.rounds:
            self.rounds[-1].eval_metrics = {k: _finite(v) for k, v in metrics.items()}
        return metrics


def _finite(value: Any) -> float | None:
    """A metric as a JSON-safe number: ε is +inf without DP, which JSON cannot carry."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def ensure_initial_version(settings: ServerSettings, cfg: TaskConfig) -> int:
    """The newest stored version, creating v0 (the untrained global adapter) if there is none."""
    store = AdapterStore(settings.adapters_dir)
    latest = store.latest()
    if latest is not None:
        config = _stored_lora_config(store, latest)
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


def _stored_lora_config(store: AdapterStore, version: int) -> dict[str, Any]:
    """The peft config stored with a version; a missing or unreadable one is a damaged store."""
    path = store.get(version).path / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or "not JSON"
        raise AdapterError(
            f"The stored global adapter v{version} is damaged: {path} cannot be read ({reason})."
        ) from None
    if not isinstance(config, dict):
        raise AdapterError(f"The stored global adapter v{version} is damaged: {path} is not a JSON object.")
    return config


def run_federation(grid: Grid, run_config: Mapping[str, Any], *, run_id: int = 0) -> dict[str, Any]:
    """Run the configured rounds on `grid`; returns (and appends to the run log) a summary."""
    cfg = TaskConfig.from_run_config(run_config)
    settings = ServerSettings.from_run_config(run_config)
    store = AdapterStore(settings.adapters_dir)
    start = ensure_initial_version(settings, cfg)
    first = store.get(start)
    lora_config = _stored_lora_config(store, start)
    began = time.time()
    if settings.secagg:
        from specsteer.federation.secagg import run_secagg

        version, rounds = run_secagg(
            grid, run_config, settings, store, start, lora_config=lora_config, base=first.base, run_id=run_id
        )
    else:
        version, rounds = _run_fedavg(
            grid, settings, store, start, lora_config=lora_config, base=first.base, run_id=run_id
        )
    summary = {
        "run_id": run_id,
        "started": began,
        "seconds": time.time() - began,
        "secure_aggregation": settings.secagg,
        "version_in": start,
        "version_out": version,
        "rounds": [r.__dict__ for r in rounds],
    }
    # The run log is published history too: a revoked attempt adds no line to it.
    with publishing(settings.state_dir, settings.attempt_token, "run log"):
        _append_run_log(settings.state_dir / RUN_LOG, summary)
    return summary


def _run_fedavg(
    grid: Grid,
    settings: ServerSettings,
    store: AdapterStore,
    start: int,
    *,
    lora_config: dict[str, Any],
    base: str,
    run_id: int,
) -> tuple[int, list[RoundRecord]]:
    strategy = VersionedFedAvg(
        store=store,
        version=start,
        lora_config=lora_config,
        base=base,
        run_id=run_id,
        settings=settings,
        fraction_train=settings.fraction_train,
        fraction_evaluate=settings.fraction_evaluate,
        min_train_nodes=settings.min_clients,
        min_evaluate_nodes=settings.min_clients if settings.fraction_evaluate > 0 else 0,
        min_available_nodes=settings.min_clients,
        wait_for_nodes=settings.round_timeout,
    )
    arrays = ArrayRecord({key: Array(value) for key, value in store.arrays(start).items()})
    strategy.start(
        grid=grid,
        initial_arrays=arrays,
        num_rounds=settings.rounds,
        timeout=settings.round_timeout,
        train_config=ConfigRecord({"adapter-version": start}),
        evaluate_config=ConfigRecord({"adapter-version": start}),
    )
    return strategy.version, strategy.rounds


def _append_run_log(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    append_line(path, json.dumps(summary))


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    go_offline()
    run_federation(grid, context.run_config, run_id=context.run_id)
