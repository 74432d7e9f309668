"""Secure aggregation: Flower's SecAgg+ over the devices' global adapters.

In Flower 1.41 SecAgg+ exists only for the legacy workflow: `SecAggPlusWorkflow` runs inside
`DefaultWorkflow` with a legacy `Strategy` and a `LegacyContext`, and the client side is
`secaggplus_mod` around a ClientApp that speaks the legacy FitIns/FitRes records. It composes
with the Message-API apps this way: the ServerApp's ``@app.main()`` builds the legacy context
and calls the workflow on the same Grid, and the ClientApp's ``@app.train()`` understands both
record layouts (`federation.client_app`). What changes for the server:

* it receives every device's adapter masked (quantized to 2^22 levels in [-8, 8] and blinded
  with pairwise masks); only the sum over the devices that finished the round can be unmasked,
  so the server sees the *average* global adapter, never one device's;
* the devices' scalar metrics (steps, weight) are still sent in the clear; ε stays on the device;
* a round needs at least 2 devices, and survives dropouts only while every remaining device still
  has ``threshold`` live neighbours (3+ devices with the default shares and threshold).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from flwr.app import Context, Message, RecordDict
from flwr.common import FitIns, FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.server import ServerConfig
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from specsteer.federation.identity import IDENTITY_KEY, byte_list
from specsteer.federation.rounds import RoundRecord, ServerSettings, VersionedRounds
from specsteer.federation.store import AdapterStore

__all__ = ["IdentityRelayGrid", "VersionedSecAggFedAvg", "run_secagg"]


def _mean_metrics(pairs: list[tuple[int, dict[str, Scalar]]]) -> dict[str, Scalar]:
    keys = set.intersection(*(set(m) for _, m in pairs)) if pairs else set()
    return {k: float(np.mean([float(m[k]) for _, m in pairs])) for k in sorted(keys)}


class VersionedSecAggFedAvg(VersionedRounds, LegacyFedAvg):
    """Legacy FedAvg (as SecAgg+ requires) that versions each aggregate like `VersionedFedAvg`."""

    def __init__(
        self,
        *,
        store: AdapterStore,
        version: int,
        keys: list[str],
        lora_config: dict[str, Any],
        base: str,
        run_id: int,
        settings: ServerSettings | None = None,
        **kwargs: Any,
    ) -> None:
        LegacyFedAvg.__init__(self, fit_metrics_aggregation_fn=_mean_metrics, **kwargs)
        self._init_versions(
            store=store, version=version, lora_config=lora_config, base=base, run_id=run_id, settings=settings
        )
        self.keys = keys
        # Flower's workflow calls aggregate_fit only for a round that reached its unmask stage; a round
        # that stopped before (devices refused at setup or share keys) is closed by `close_aborted`.
        self.open_record: RoundRecord | None = None
        self.stage_refusals: list[str] = []  # the refusals `IdentityRelayGrid` saw in the open round

    def close_aborted(self) -> None:
        """End the open round's record if the workflow stopped it before aggregation: no update, no
        version, and the refusals its devices answered the SecAgg+ stages with."""
        if self.open_record is not None:
            self.open_record.refusals = list(self.stage_refusals)
            self.end_round(self.open_record)
            self.open_record = None

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        self.close_aborted()
        self.stage_refusals.clear()
        self.open_record = self.open_round(server_round)
        pairs = super().configure_fit(server_round, parameters, client_manager)
        for _, ins in pairs:
            ins.config = {**ins.config, **self.version_config(server_round)}
        return pairs

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        record = self.rounds[-1]
        record.replies = len(results)
        record.refusals = [str(f) if isinstance(f, BaseException) else f[1].status.message for f in failures]
        # SecAgg+ hands every result the same, already averaged and unmasked, parameters.
        parameters, metrics = super().aggregate_fit(server_round, results, failures)
        if parameters is not None:
            arrays = parameters_to_ndarrays(parameters)
            tensors = dict(zip(self.keys, (np.asarray(a, dtype=np.float32) for a in arrays), strict=True))
            self.save_version(server_round, tensors, devices=len(results), extra={"secure_aggregation": "secagg+"})
        record.train_metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        self.end_round(record)
        self.open_record = None
        return parameters, metrics

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        self.close_aborted()
        if self.rounds and self.rounds[-1].version_out is None:
            return []  # no new version: the devices evaluated this one already (Flower skips the stage)
        pairs = super().configure_evaluate(server_round, parameters, client_manager)
        for _, ins in pairs:
            ins.config = {**ins.config, **self.version_config(server_round)}
        return pairs


class IdentityRelayGrid(Grid):
    """The run's Grid, relaying each device's identity binding with its SecAgg+ keys (issue #50, finding 2).

    Flower's `SecAggPlusWorkflow` keeps only the two public keys of each setup reply and forwards
    only those in the share-keys stage. This Grid remembers the binding a device adds to its setup
    reply (`federation.identity.IDENTITY_KEY`: its node public key, its endorsement and its
    signature over the keys) and appends it to that device's entry wherever the share-keys stage
    forwards its keys, so every neighbour can check it before sending a share. The workflow
    itself is Flower's, unchanged; everything but `send_and_receive` is the wrapped Grid's. It also
    keeps each error reply's reason (`refusals`), for a round the workflow stops before aggregation.
    """

    def __init__(self, grid: Grid, refusals: list[str] | None = None) -> None:
        self.inner = grid
        self.bindings: dict[int, list[bytes]] = {}
        self.refusals = refusals if refusals is not None else []  # each error reply's reason, in order

    def set_run(self, run: Run) -> None:
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        return self.inner.run

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages([self._relay(m) for m in messages])

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._remember(m) for m in self.inner.pull_messages(message_ids)]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        replies = self.inner.send_and_receive([self._relay(m) for m in messages], timeout=timeout)
        return [self._remember(m) for m in replies]

    def _relay(self, message: Message) -> Message:
        configs = message.content.config_records.get(RECORD_KEY_CONFIGS) if message.has_content() else None
        if configs is not None and configs.get(Key.STAGE) == Stage.SHARE_KEYS:
            for name in list(configs):
                keys = byte_list(configs[name])
                if name != Key.STAGE and keys is not None and name.isdigit() and int(name) in self.bindings:
                    configs[name] = [*keys, *self.bindings[int(name)]]
        return message

    def _remember(self, reply: Message) -> Message:
        if reply.has_error():
            self.refusals.append(reply.error.reason or f"error code {reply.error.code}")
        if reply.has_content():
            configs = reply.content.config_records.get(RECORD_KEY_CONFIGS)
            binding = byte_list(configs.get(IDENTITY_KEY)) if configs is not None else None
            if binding is not None:
                self.bindings[reply.metadata.src_node_id] = binding
        return reply


def run_secagg(
    grid: Grid,
    run_config: Mapping[str, Any],
    settings: ServerSettings,
    store: AdapterStore,
    start: int,
    *,
    lora_config: dict[str, Any],
    base: str,
    run_id: int,
) -> tuple[int, list[RoundRecord]]:
    """Run the configured rounds with SecAgg+; returns (final version, round records)."""
    arrays = store.arrays(start)
    keys = sorted(arrays)
    strategy = VersionedSecAggFedAvg(
        store=store,
        version=start,
        keys=keys,
        lora_config=lora_config,
        base=base,
        run_id=run_id,
        settings=settings,
        fraction_fit=settings.fraction_train,
        fraction_evaluate=settings.fraction_evaluate,
        min_fit_clients=max(2, settings.min_clients),
        min_evaluate_clients=settings.min_clients if settings.fraction_evaluate > 0 else 0,
        min_available_clients=max(2, settings.min_clients),
        initial_parameters=ndarrays_to_parameters([arrays[k] for k in keys]),
    )
    context = LegacyContext(
        context=Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config)),
        config=ServerConfig(num_rounds=settings.rounds, round_timeout=settings.round_timeout),
        strategy=strategy,
    )
    workflow = DefaultWorkflow(
        fit_workflow=SecAggPlusWorkflow(
            num_shares=settings.secagg_shares,
            reconstruction_threshold=settings.secagg_threshold,
            # Devices report num_examples = 1. The mod scales each update by num_examples / max_weight
            # before quantizing, so Flower's default of 1000 would cost 10 bits of precision.
            max_weight=1.0,
            timeout=settings.round_timeout,
        )
    )
    workflow(IdentityRelayGrid(grid, strategy.stage_refusals), context)
    strategy.close_aborted()
    return strategy.version, strategy.rounds
