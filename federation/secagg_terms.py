"""The device's terms for SecAgg+: what Flower's `secaggplus_mod` would otherwise take from the server.

Flower's mod takes every SecAgg+ setting from the server's messages and answers whatever it is
asked. A malicious server unmasked one device's update from honest devices' replies alone
(``/tmp/attack12_fed/attack_secagg.py``): with a threshold of 1 and a cohort of one, the device's
own unmask reply held its self-mask seed in the clear; with 3 devices and threshold 2, listing the
target as both active and dead in the unmask stage made the two others return both of its shares
(its self-mask seed and its pairwise-mask key), and the server read its update alone.

`check_stage` runs before the mod, on every SecAgg+ message, and raises `SecAggRefusal` unless:

* setup: the cohort is at least the device's ``secagg-min-cohort`` (node config, default 3), and
  the threshold is more than half the shares (and at most all of them);
* share keys: the device is among the keys, and their number is within [min cohort, shares];
* collect masked vectors: every source is one of those keys (not the device, none twice), and at
  least enough to meet both the threshold and the minimum cohort;
* unmask: the active and dead lists hold no node twice, share none, hold only nodes whose shares
  the device holds, list the device as active (it is answering) and never as dead, and the active
  nodes reach the threshold.

Why "more than half": each honest device answers one unmask message, with either the self-mask
share (target active) or the key share (target dead), never both now. Reconstructing both secrets
of one device needs the threshold t of each kind from disjoint sets of its m ≤ shares holders,
so 2t ≤ m; with 2t > shares that is impossible.

What this cannot do: the device cannot tell a real neighbour from one the server plays itself.
Without authenticated keys (a PKI binding each public key to a real device), a server that
invents the other members of a cohort (Sybils) holds their secret keys, decrypts the shares the
device sends them and unmasks its update with no unmask stage at all. SecAgg+ here protects the
update against an honest-but-curious server only; against a malicious one the protection is the
DP noise every update carries (`docs/federation.md`).
"""

from __future__ import annotations

from typing import Any

from flwr.app import ConfigRecord, RecordDict
from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE, Key, Stage

from specsteer.federation.errors import SecAggRefusal

__all__ = ["check_stage"]

_ORDER = (Stage.SETUP, Stage.SHARE_KEYS, Stage.COLLECT_MASKED_VECTORS, Stage.UNMASK)


def check_stage(configs: ConfigRecord, state: RecordDict, node_id: int, *, min_cohort: int) -> None:
    """Raise `SecAggRefusal` unless this SecAgg+ message meets the device's terms (module docstring).

    `state` is the run's context state, where Flower's mod keeps its own; `node_id` is the
    message's destination (the device). Nothing is changed: the mod runs after this.
    """
    stage = configs.get(Key.STAGE)
    if stage == Stage.SETUP:
        _setup(configs, min_cohort)
        return
    if stage not in _ORDER:
        raise SecAggRefusal(f"unknown SecAgg+ stage {stage!r}")
    saved = state.config_records.get(RECORD_KEY_STATE)
    flower = SecAggPlusState(**saved) if saved is not None else None
    if flower is None or _ORDER.index(str(stage)) != _ORDER.index(flower.current_stage) + 1:
        raise SecAggRefusal(f"the SecAgg+ stage {stage} comes out of order")
    if stage == Stage.SHARE_KEYS:
        _share_keys(configs, flower, min_cohort)
    elif stage == Stage.COLLECT_MASKED_VECTORS:
        _collect(configs, flower, min_cohort)
    else:
        _unmask(configs, flower)


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SecAggRefusal(f"the SecAgg+ {name} {value!r} is not a whole number")
    return value


def _node_ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list):
        raise SecAggRefusal(f"the SecAgg+ {name} is not a list of node ids")
    ids = [_whole(v, name) for v in value]
    if len(set(ids)) != len(ids):
        raise SecAggRefusal(f"the SecAgg+ {name} names a node twice")
    return ids


def _setup(configs: ConfigRecord, min_cohort: int) -> None:
    sample = _whole(configs.get(Key.SAMPLE_NUMBER), "sample number")
    shares = _whole(configs.get(Key.SHARE_NUMBER), "share number")
    threshold = _whole(configs.get(Key.THRESHOLD), "threshold")
    if not min_cohort <= shares <= sample:
        raise SecAggRefusal(
            f"the SecAgg+ cohort ({shares} shares of {sample} devices) is smaller than this device's minimum "
            f"of {min_cohort}, or inconsistent"
        )
    if not shares < 2 * threshold <= 2 * shares:
        raise SecAggRefusal(
            f"the SecAgg+ threshold {threshold} of {shares} shares is not more than half of them: "
            "a server could gather both secrets of one device"
        )


def _share_keys(configs: ConfigRecord, flower: SecAggPlusState, min_cohort: int) -> None:
    keys: list[int] = []
    for name in configs:
        if name == Key.STAGE:
            continue
        try:
            node = int(name)
        except ValueError:
            raise SecAggRefusal(f"the SecAgg+ key list names {name!r}, which is no node id") from None
        if str(node) != name:  # "7" and "07" would be one node twice
            raise SecAggRefusal(f"the SecAgg+ key list names node {name!r} in a second spelling")
        keys.append(node)
    if flower.nid not in keys:
        raise SecAggRefusal("the SecAgg+ key list leaves this device out")
    if not max(min_cohort, flower.threshold) <= len(keys) <= flower.share_num:
        raise SecAggRefusal(
            f"the SecAgg+ key list holds {len(keys)} devices, outside [{max(min_cohort, flower.threshold)}, "
            f"{flower.share_num}]"
        )


def _collect(configs: ConfigRecord, flower: SecAggPlusState, min_cohort: int) -> None:
    sources = _node_ids(configs.get(Key.SOURCE_LIST), "source list")
    texts = configs.get(Key.CIPHERTEXT_LIST)
    if not isinstance(texts, list) or len(texts) != len(sources):
        raise SecAggRefusal("the SecAgg+ ciphertexts and their sources do not pair up")
    neighbours = set(flower.public_keys_dict) - {flower.nid}
    if not set(sources) <= neighbours:
        raise SecAggRefusal("the SecAgg+ sources name a node outside this device's key list")
    if len(sources) + 1 < max(flower.threshold, min_cohort):
        raise SecAggRefusal(
            f"the SecAgg+ round masks this device among {len(sources) + 1}, fewer than "
            f"{max(flower.threshold, min_cohort)}"
        )


def _unmask(configs: ConfigRecord, flower: SecAggPlusState) -> None:
    active = _node_ids(configs.get(Key.ACTIVE_NODE_ID_LIST), "active list")
    dead = _node_ids(configs.get(Key.DEAD_NODE_ID_LIST), "dead list")
    both = set(active) & set(dead)
    if both:
        # The attack: a node listed both ways gets its self-mask share *and* its key share back.
        raise SecAggRefusal(f"the SecAgg+ unmask stage lists {len(both)} node(s) as both active and dead")
    if flower.nid not in active:
        raise SecAggRefusal("the SecAgg+ unmask stage does not list this device, which is answering, as active")
    held = set(flower.rd_seed_share_dict) & set(flower.sk1_share_dict)
    if not set(active) | set(dead) <= held:
        raise SecAggRefusal("the SecAgg+ unmask stage names a node whose shares this device does not hold")
    if len(active) < flower.threshold:
        raise SecAggRefusal(f"the SecAgg+ unmask stage lists {len(active)} active devices, below the threshold")
