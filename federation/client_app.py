"""The Flower ClientApp: one SuperNode is one device with its own private history.

What a device sends back (and nothing else):

* train: the *global* adapter's arrays after DP-SGD (personal adapter disabled during that
  training), in key order, and a MetricRecord ``{"weight": 1}``. Every device weighs the same.
  The number of steps the device chose, its ε and whether it sat the round out for lack of
  budget (then the arrays are the ones it received) all depend on the history's size, so none
  is sent: every train reply has this one shape.
* evaluate: ``{"weight": 1}``. Held-out losses are not DP; they stay in the device's own log.
* a refusal: a Flower error reply with one of a few fixed sentences, one per kind of refusal
  (`federation.errors.Refusal.public`: not eligible, a run asking for less privacy than the
  device's policy, settings outside the device's limits, a message it does not accept, secure
  aggregation not on its terms, or "could not take part"); none depends on the history, and none
  names the device's own figures or flags (its minimum noise multiplier, its δ, which flag is
  off would tell one device from another). No path, user id or exception text leaves the
  device; the detail goes to the device's own log.

The personal adapter is read from and written to the device's state folder only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, EvaluateRes, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE, Key, Stage
from flwr.compat.common import recorddict_compat as compat

from specsteer.core.session_types import MAX_ADAPTER_VERSION
from specsteer.federation.errors import MessageRefusal, Refusal, SecAggRefusal
from specsteer.federation.identity import IDENTITY_KEY, NodeIdentity, byte_list
from specsteer.federation.offline import go_offline
from specsteer.federation.participant import Device, EligibilityPolicy
from specsteer.federation.secagg_terms import check_stage
from specsteer.federation.task import GLOBAL, specialist_for

__all__ = ["REFUSED", "app", "handle_evaluate", "handle_train", "optional_secaggplus_mod"]

log = logging.getLogger(__name__)

# Flower's codes stop at 8; a refusal is the device's decision, not a crash, so it gets its own.
REFUSED = 100


def optional_secaggplus_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's SecAgg+ mod for train messages of a secure-aggregation run, on the device's terms.

    `secaggplus_mod` refuses train messages that carry no SecAgg+ stage, so a ClientApp that
    always had it could not take part in plain FedAvg runs; this lets one app serve both. A device
    whose node config sets ``secagg-required`` refuses a train message without SecAgg+. Every
    SecAgg+ message is checked against the device's terms first (`federation.secagg_terms`:
    cohort, threshold, the nodes each stage names), and whatever fails in the mod is a refusal in
    one fixed sentence, never a traceback.
    """
    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
    device = None
    try:
        device = Device.from_node_config(context.node_config)
        if configs is None:
            if device.dp_policy.secagg_required:
                raise SecAggRefusal("the run trains without secure aggregation, which this device requires")
            return call_next(msg, context)
        check_stage(configs, context.state, msg.metadata.dst_node_id, min_cohort=device.dp_policy.secagg_min_cohort)
        identity = NodeIdentity.load(device.identity_dir) if device.identity_dir is not None else None
        stage = configs.get(Key.STAGE)
        if stage == Stage.SHARE_KEYS:
            _check_bindings(msg, configs, context, identity, device.dp_policy.secagg_min_cohort)
    except Exception as exc:  # the device's terms (or its node config) say no: a refusal
        return _refuse(msg, context, device, exc, "train")
    inner: list[Message] = []

    def remember(m: Message, c: Context) -> Message:
        reply = call_next(m, c)
        inner.append(reply)
        return reply

    try:
        reply = secaggplus_mod(msg, context, remember)
        if stage == Stage.SETUP and identity is not None and not reply.has_error():
            # The keys just made, bound to this device's node key: neighbours check it (share keys).
            got = reply.content.config_records[RECORD_KEY_CONFIGS]
            got[IDENTITY_KEY] = identity.bind(
                run_id=msg.metadata.run_id,
                server_round=msg.metadata.group_id,
                node_id=msg.metadata.dst_node_id,
                pk1=bytes(got[Key.PUBLIC_KEY_1]),  # type: ignore[arg-type]
                pk2=bytes(got[Key.PUBLIC_KEY_2]),  # type: ignore[arg-type]
            )
        return reply
    except Exception as exc:
        if inner and inner[-1].has_error():
            return inner[-1]  # the device refused the round itself (policy, budget, ...): that refusal
        failed = SecAggRefusal(f"the SecAgg+ stage failed: {type(exc).__name__}: {exc}")
        return _refuse(msg, context, device, failed, "train")


def _check_bindings(
    msg: Message, configs: ConfigRecord, context: Context, identity: NodeIdentity | None, min_cohort: int
) -> None:
    """Check the share-keys stage's bindings (a device with an identity), then hand Flower's mod the bare keys.

    A device with an identity refuses unless every entry is bound to an enrolled device and the
    distinct devices reach its threshold and minimum cohort (`NodeIdentity.check_cohort`): a
    server that seats nodes of its own can no longer read the shares sent to them. The entries
    are replaced by their two SecAgg+ keys, the layout Flower's mod reads.
    """
    entries: dict[int, list[bytes]] = {}
    for name, value in configs.items():
        if name != Key.STAGE:
            parts = byte_list(value)
            if parts is None or len(parts) < 2:
                raise SecAggRefusal(f"the SecAgg+ keys of node {name} are not a list of keys")
            entries[int(name)] = parts  # check_stage made sure each name is a node id
    if identity is not None:
        flower = SecAggPlusState(**context.state.config_records[RECORD_KEY_STATE])
        keys = identity.check_cohort(
            entries,
            run_id=msg.metadata.run_id,
            server_round=msg.metadata.group_id,
            own_node=msg.metadata.dst_node_id,
            least=max(flower.threshold, min_cohort),
        )
    else:
        keys = {node: (entry[0], entry[1]) for node, entry in entries.items()}
    bare = ConfigRecord({str(node): list(pair) for node, pair in keys.items()})
    bare[Key.STAGE] = Stage.SHARE_KEYS
    msg.content.config_records[RECORD_KEY_CONFIGS] = bare


app = ClientApp(mods=[optional_secaggplus_mod])


def _is_legacy(msg: Message, kind: str) -> bool:
    """SecAgg+ runs use Flower's legacy workflow, whose messages carry FitIns/EvaluateIns records."""
    return f"{kind}.parameters" in msg.content.array_records


@dataclass(frozen=True)
class Unpacked:
    """What a train or evaluate message carries for the device."""

    arrays: dict[str, np.ndarray]
    version: int
    server_round: int
    base: str | None  # the server's base-model fingerprint (None: a server that does not send it)


def _unpack(msg: Message, context: Context, kind: str) -> Unpacked:
    """The message's adapter, version, round and base; `MessageRefusal` for what a server should not send."""
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
            raise MessageRefusal(f"the message carries {len(values)} arrays, the global adapter has {len(keys)}")
        arrays = dict(zip(keys, values, strict=True))
    else:
        if "arrays" not in content.array_records:
            raise MessageRefusal("the message carries no global adapter arrays")
        arrays = {key: np.asarray(value.numpy()) for key, value in content.array_records["arrays"].items()}
        config = content.config_records.get("config", {})
    version = config.get("adapter-version", 0)
    # A version past what a session may declare would stay the device's newest for good, and no
    # session could declare it: the device would serve no generation with its adapter again.
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_ADAPTER_VERSION:
        raise MessageRefusal(f"the message's adapter version {version!r} is outside [0, {MAX_ADAPTER_VERSION}]")
    base = config.get("base-fingerprint")
    if base is not None and not isinstance(base, str):
        raise MessageRefusal(f"the message's base-fingerprint {base!r} is not a string")
    server_round = config.get("server-round", 0)
    if isinstance(server_round, bool) or not isinstance(server_round, int):
        raise MessageRefusal(f"the message's server-round {server_round!r} is not a whole number")
    return Unpacked(arrays, version, server_round, base)


def _adapter_keys(context: Context) -> list[str]:
    device = Device.from_configs(context.node_config, context.run_config)
    return sorted(specialist_for(device.cfg, cache_dir=device.cache_dir).get_adapter(GLOBAL))


UNAVAILABLE = Refusal.public


def refusal_reason(exc: BaseException) -> str:
    """What the server may read about a refusal: its kind's fixed sentence, never figures, flags,
    paths, user ids or exception text (those are in the device's own log)."""
    return exc.public if isinstance(exc, Refusal) else UNAVAILABLE


def _refuse(msg: Message, context: Context, device: Device | None, exc: BaseException, kind: str) -> Message:
    # Every refusal's detail goes to the device's own log: the server reads only the fixed sentence.
    cause = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
    try:
        if device is None:
            raise RuntimeError("no device")
        device.log({"event": "refused", "kind": kind, "run_id": context.run_id, "cause": cause})
    except Exception:  # the log itself may be what failed; the SuperNode's own stderr stays local
        log.warning("federation device refused a %s message: %s", kind, cause)
    return Message(Error(code=REFUSED, reason=refusal_reason(exc)), reply_to=msg)


@app.train()
def handle_train(msg: Message, context: Context) -> Message:
    go_offline()
    device = None
    try:
        device = Device.from_node_config(context.node_config)  # so that a refusal of the run is in its log
        device = device.for_run(context.run_config)
        got = _unpack(msg, context, "fitins")
        result = device.train_round(
            got.arrays,
            got.version,
            policy=EligibilityPolicy.from_run_config(context.run_config),
            run_id=context.run_id,
            server_round=got.server_round,
            base=got.base,
        )
    except Exception as exc:  # any failure is a refusal; what it was stays on the device
        return _refuse(msg, context, device, exc, "train")
    # Nothing that depends on the history's size: not the steps the device chose, not its ε.
    weight = 1
    if _is_legacy(msg, "fitins"):
        # Under SecAgg+ the mod masks these arrays before they leave; num_examples=1 weighs devices equally.
        ordered = [result.arrays[k] for k in sorted(result.arrays)]
        fitres = FitRes(Status(Code.OK, "ok"), ndarrays_to_parameters(ordered), 1, {"weight": weight})
        return Message(compat.fitres_to_recorddict(fitres, False), reply_to=msg)
    reply = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(np.ascontiguousarray(result.arrays[k])) for k in sorted(result.arrays)}),
            "metrics": MetricRecord({"weight": weight}),
        }
    )
    return Message(reply, reply_to=msg)


@app.evaluate()
def handle_evaluate(msg: Message, context: Context) -> Message:
    go_offline()
    device = None
    try:
        device = Device.from_node_config(context.node_config)  # so that a refusal of the run is in its log
        device = device.for_run(context.run_config)
        got = _unpack(msg, context, "evaluateins")
        # The losses are measured and logged on the device; they are not DP, so none is sent.
        device.evaluate_round(
            got.arrays,
            got.version,
            policy=EligibilityPolicy.from_run_config(context.run_config),
            run_id=context.run_id,
            server_round=got.server_round,
            base=got.base,
        )
    except Exception as exc:
        return _refuse(msg, context, device, exc, "evaluate")
    if _is_legacy(msg, "evaluateins"):
        res = EvaluateRes(Status(Code.OK, "ok"), 0.0, 1, {})
        return Message(compat.evaluateres_to_recorddict(res), reply_to=msg)
    return Message(RecordDict({"metrics": MetricRecord({"weight": 1})}), reply_to=msg)
