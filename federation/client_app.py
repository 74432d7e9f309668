"""The Flower ClientApp: one SuperNode is one device with its own private history.

What a device sends back (and nothing else):

* train: the *global* adapter's arrays after DP-SGD (personal adapter disabled during that
  training), and a MetricRecord ``{"weight": 1, "epsilon": ε so far, "dp-steps": k}`` (ε is +inf
  in a ``--no-dp`` run). Every device weighs the same, so its history size is not disclosed.
* evaluate: ``{"weight": 1}``, plus held-out losses only if the run sets ``share-eval-metrics``
  (they are not DP; by default they stay in the device's own log).
* a refusal (not eligible, budget spent, bad data): a Flower error reply with a one-line reason.

The personal adapter is read from and written to the device's state folder only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, EvaluateRes, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat

from core.errors import SpecSteerError
from federation.device import Device, Policy
from federation.task import GLOBAL, specialist_for

__all__ = ["REFUSED", "app", "handle_evaluate", "handle_train", "optional_secaggplus_mod"]

# Flower's codes stop at 8; a refusal is the device's decision, not a crash, so it gets its own.
REFUSED = 100


def optional_secaggplus_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's SecAgg+ mod for train messages of a secure-aggregation run, a no-op otherwise.

    `secaggplus_mod` refuses train messages that carry no SecAgg+ stage, so a ClientApp that
    always had it could not take part in plain FedAvg runs; this lets one app serve both.
    """
    if msg.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in msg.content.config_records:
        return secaggplus_mod(msg, context, call_next)
    return call_next(msg, context)


app = ClientApp(mods=[optional_secaggplus_mod])


def _is_legacy(msg: Message, kind: str) -> bool:
    """SecAgg+ runs use Flower's legacy workflow, whose messages carry FitIns/EvaluateIns records."""
    return f"{kind}.parameters" in msg.content.array_records


def _unpack(msg: Message, context: Context, kind: str) -> tuple[dict[str, np.ndarray], int, int]:
    content = msg.content
    if _is_legacy(msg, kind):
        ins = (
            compat.recorddict_to_fitins(content, True)
            if kind == "fitins"
            else compat.recorddict_to_evaluateins(content, True)
        )
        config: Any = ins.config
        # Legacy parameters are an ordered list; both sides order the adapter's arrays by key.
        keys = _adapter_keys(context)
        values = parameters_to_ndarrays(ins.parameters)
        if len(values) != len(keys):
            raise ValueError(f"the message carries {len(values)} arrays, the global adapter has {len(keys)}")
        arrays = dict(zip(keys, values, strict=True))
    else:
        if "arrays" not in content.array_records:
            raise ValueError("the message carries no global adapter arrays")
        arrays = {key: np.asarray(value.numpy()) for key, value in content.array_records["arrays"].items()}
        config = content.config_records.get("config", {})
    return arrays, int(config.get("adapter-version", 0)), int(config.get("server-round", 0))


def _adapter_keys(context: Context) -> list[str]:
    device = Device.from_configs(context.node_config, context.run_config)
    return sorted(specialist_for(device.cfg, cache_dir=device.cache_dir).get_adapter(GLOBAL))


def _refuse(msg: Message, exc: BaseException) -> Message:
    return Message(Error(code=REFUSED, reason=str(exc)), reply_to=msg)


@app.train()
def handle_train(msg: Message, context: Context) -> Message:
    try:
        device = Device.from_configs(context.node_config, context.run_config)
        arrays, version, server_round = _unpack(msg, context, "fitins")
        result = device.train_round(
            arrays,
            version,
            policy=Policy.from_run_config(context.run_config),
            run_id=context.run_id,
            server_round=server_round,
        )
    except (SpecSteerError, ValueError) as exc:
        return _refuse(msg, exc)
    metrics = {"weight": 1, "epsilon": float(result.epsilon), "dp-steps": int(result.steps)}
    if _is_legacy(msg, "fitins"):
        # Under SecAgg+ the mod masks these arrays before they leave; num_examples=1 weighs devices equally.
        ordered = [result.arrays[k] for k in sorted(result.arrays)]
        fitres = FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(ordered), 1, metrics)
        return Message(compat.fitres_to_recorddict(fitres, False), reply_to=msg)
    reply = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in result.arrays.items()}),
            "metrics": MetricRecord(metrics),
        }
    )
    return Message(reply, reply_to=msg)


@app.evaluate()
def handle_evaluate(msg: Message, context: Context) -> Message:
    try:
        device = Device.from_configs(context.node_config, context.run_config)
        arrays, version, server_round = _unpack(msg, context, "evaluateins")
        metrics = device.evaluate_round(
            arrays,
            version,
            policy=Policy.from_run_config(context.run_config),
            run_id=context.run_id,
            server_round=server_round,
        )
    except (SpecSteerError, ValueError) as exc:
        return _refuse(msg, exc)
    shared: dict[str, float | int] = {"weight": 1}
    if str(context.run_config.get("share-eval-metrics", False)).lower() in ("1", "true"):
        shared.update({k: float(v) for k, v in metrics.items()})
    if _is_legacy(msg, "evaluateins"):
        loss = float(metrics["loss-global"]) if "loss-global" in shared else 0.0
        res = EvaluateRes(Status(Code.OK, "ok"), loss, 1, {k: v for k, v in shared.items() if k != "weight"})
        return Message(compat.evaluateres_to_recorddict(res), reply_to=msg)
    return Message(RecordDict({"metrics": MetricRecord(shared)}), reply_to=msg)
