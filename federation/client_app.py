"""The Flower ClientApp: one SuperNode is one device with its own private history.

What a device sends back (and nothing else):

* train: the *global* adapter's arrays after DP-SGD (personal adapter disabled during that
  training), and a MetricRecord ``{"weight": 1, "epsilon": ε so far, "dp-steps": k}``. Every device
  weighs the same, so its history size is not disclosed.
* evaluate: ``{"weight": 1}``, plus held-out losses only if the run sets ``share-eval-metrics``
  (they are not DP; by default they stay in the device's own log).
* a refusal (not eligible, budget spent, bad data): a Flower error reply with a one-line reason.

The personal adapter is read from and written to the device's state folder only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from federation.device import Device, Policy
from sdk.errors import SpecSteerError

__all__ = ["REFUSED", "app", "handle_evaluate", "handle_train"]

# Flower's codes stop at 8; a refusal is the device's decision, not a crash, so it gets its own.
REFUSED = 100

app = ClientApp()


def _unpack(msg: Message) -> tuple[dict[str, np.ndarray], int, int]:
    content = msg.content
    if "arrays" not in content.array_records:
        raise ValueError("the message carries no global adapter arrays")
    arrays = {key: np.asarray(value.numpy()) for key, value in content.array_records["arrays"].items()}
    config: Any = content.config_records.get("config", {})
    version = int(config.get("adapter-version", 0))
    server_round = int(config.get("server-round", 0))
    return arrays, version, server_round


def _refuse(msg: Message, exc: BaseException) -> Message:
    return Message(Error(code=REFUSED, reason=str(exc)), reply_to=msg)


@app.train()
def handle_train(msg: Message, context: Context) -> Message:
    try:
        device = Device.from_configs(context.node_config, context.run_config)
        arrays, version, server_round = _unpack(msg)
        result = device.train_round(
            arrays,
            version,
            policy=Policy.from_run_config(context.run_config),
            run_id=context.run_id,
            server_round=server_round,
        )
    except (SpecSteerError, ValueError) as exc:
        return _refuse(msg, exc)
    reply = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in result.arrays.items()}),
            "metrics": MetricRecord(
                {"weight": 1, "epsilon": float(min(result.epsilon, 1e9)), "dp-steps": int(result.steps)}
            ),
        }
    )
    return Message(reply, reply_to=msg)


@app.evaluate()
def handle_evaluate(msg: Message, context: Context) -> Message:
    try:
        device = Device.from_configs(context.node_config, context.run_config)
        arrays, version, server_round = _unpack(msg)
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
    return Message(RecordDict({"metrics": MetricRecord(shared)}), reply_to=msg)
