"""SecAgg+ (Flower's legacy workflow inside our ServerApp): the server learns only the average."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters
from flwr.compat.common import recorddict_compat as compat

import specsteer.federation.participant
from specsteer.federation.budget_ledger import Ledger
from specsteer.federation.deploy import provision_deployment
from specsteer.federation.errors import ConfigError, PolicyRefusal, SecAggRefusal
from specsteer.federation.identity import IDENTITY_KEY, NodeIdentity
from specsteer.federation.rounds import ServerSettings
from specsteer.federation.simulation import run_in_process
from specsteer.federation.store import AdapterStore
from tests.federation.conftest import deliver, node_configs, run_config, v0_arrays


def _capture(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, np.ndarray]]:
    """Record, per device, the global adapter its DP training produced (what it would send)."""
    captured: dict[str, dict[str, np.ndarray]] = {}
    real = specsteer.federation.participant.train_global_dp

    def wrapper(sw: Any, train_set: Any, cfg: Any, ledger: Ledger | None, **kwargs: Any) -> Any:
        result = real(sw, train_set, cfg, ledger, **kwargs)
        assert ledger is not None
        captured[ledger.path.parent.name] = {k: v.copy() for k, v in result.arrays.items()}
        return result

    monkeypatch.setattr(specsteer.federation.participant, "train_global_dp", wrapper)
    return captured


def _windows(arrays: dict[str, np.ndarray]) -> list[bytes]:
    out = []
    for arr in arrays.values():
        flat = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1)
        out += [flat[i : i + 4].tobytes() for i in range(0, flat.size - 3, 4) if np.any(flat[i : i + 4] != 0)]
    return out


def _enrolled(folder: Path, names: list[str]) -> dict[str, str]:
    """Device identities as `federation deploy` provisions them: name -> its identity-dir."""
    return {name: str(path) for name, path in provision_deployment(folder, names).devices.items()}


def test_secagg_server_sees_only_the_average(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With enrolled identities (`federation deploy`'s): every device binds its keys and checks the others'."""
    captured = _capture(monkeypatch)
    config = run_config(tiny_bpe_model, tmp_path, secagg=True, **{"min-clients": 3})
    nodes = node_configs(tiny_bpe_model, tmp_path, 3)
    identities = _enrolled(tmp_path / "deploy", ["device0", "device1", "device2"])
    for node in nodes:
        node["identity-dir"] = identities[Path(node["state-dir"]).name]
    summary, grid = run_in_process(config, nodes)

    assert summary["secure_aggregation"] is True
    assert (summary["version_in"], summary["version_out"]) == (0, 1)
    assert summary["rounds"][0]["replies"] == 3
    v1 = AdapterStore(tmp_path / "server" / "adapters").arrays(1)
    assert sorted(captured) == ["device0", "device1", "device2"]
    for key, value in v1.items():
        mean = np.mean([captured[d][key] for d in captured], axis=0)
        np.testing.assert_allclose(value, mean, atol=1e-4)  # SecAgg+ quantizes to 2^22 levels

    # No device's adapter appears in anything it sent: only masked, quantized vectors leave.
    sent = b"".join(b for d in grid.deliveries for b in d.sent_bytes)
    for device, arrays in captured.items():
        windows = _windows(arrays)
        assert windows and not any(w in sent for w in windows), device
    stages = {
        d.message.content["secaggplus_configs"]["stage"]
        for d in grid.deliveries
        if d.message.metadata.message_type == "train"
    }
    assert stages == {"setup", "share_keys", "collect_masked_vectors", "unmask"}
    # The keys each device received came with their bindings (the server relayed them).
    share_keys = [
        d.message.content["secaggplus_configs"]
        for d in grid.deliveries
        if d.message.metadata.message_type == "train"
        and d.message.content["secaggplus_configs"]["stage"] == "share_keys"
    ]
    assert share_keys and all(len(v) == 5 for c in share_keys for k, v in c.items() if k != "stage")


def test_a_round_its_devices_refuse_before_aggregation_says_why(tiny_bpe_model: Path, tmp_path: Path) -> None:
    """A round Flower's workflow stops before its unmask stage never reaches aggregate_fit: its record
    said "0 replies, no refusal" (the operator saw only "no device trained"). Now it carries what the
    devices answered: here one device's identity is endorsed by another enrollment key (a node the
    server seated), and every device refuses the share-keys stage. The devices were then asked to
    evaluate the version they already had; no longer."""
    config = run_config(tiny_bpe_model, tmp_path, secagg=True, **{"min-clients": 3})
    nodes = node_configs(tiny_bpe_model, tmp_path, 3)
    identities = _enrolled(tmp_path / "deploy", ["device0", "device1"])
    identities["device2"] = _enrolled(tmp_path / "server-deploy", ["device2"])["device2"]
    for node in nodes:
        node["identity-dir"] = identities[Path(node["state-dir"]).name]
    summary, grid = run_in_process(config, nodes)

    (round_,) = summary["rounds"]
    assert (round_["replies"], round_["version_out"], summary["version_out"]) == (0, None, 0)
    assert round_["refusals"] == [SecAggRefusal.public] * 3
    # No new version, so nothing new to evaluate: the devices are not asked to load and score v0 again.
    assert not [d for d in grid.deliveries if d.message.metadata.message_type == "evaluate"]
    for device in ("device0", "device1", "device2"):
        causes = [
            json.loads(line).get("cause", "") for line in (tmp_path / device / "rounds.jsonl").read_text().splitlines()
        ]
        assert any("not bound to an enrolled device identity" in c for c in causes), (device, causes)


def test_secagg_survives_a_dropout_after_keys_are_shared(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = _capture(monkeypatch)

    def vanish_before_sending_its_vector(msg: Message) -> bool:
        configs = msg.content.config_records.get("secaggplus_configs")
        return configs is not None and configs["stage"] == "collect_masked_vectors"

    config = run_config(tiny_bpe_model, tmp_path, secagg=True, **{"min-clients": 3})
    summary, _ = run_in_process(
        config, node_configs(tiny_bpe_model, tmp_path, 3), dropouts={2: vanish_before_sending_its_vector}
    )
    assert summary["version_out"] == 1 and summary["rounds"][0]["replies"] == 2
    assert sorted(captured) == ["device0", "device1"]
    v1 = AdapterStore(tmp_path / "server" / "adapters").arrays(1)
    for key, value in v1.items():
        np.testing.assert_allclose(value, (captured["device0"][key] + captured["device1"][key]) / 2, atol=1e-4)


# --- the device's terms (federation.secagg_terms): a malicious server drives the stages by hand ---

CLIP, QUANT, MOD = 8.0, 4194304, 4294967296


def _setup(sample: int, shares: int, threshold: Any) -> RecordDict:
    configs = {
        "stage": "setup",
        "sample_num": sample,
        "share_num": shares,
        "threshold": threshold,
        "clipping_range": CLIP,
        "target_range": QUANT,
        "mod_range": MOD,
        "max_weight": 1.0,
    }
    return RecordDict({"secaggplus_configs": ConfigRecord(configs)})


def _stage(stage: str, **configs: Any) -> RecordDict:
    return RecordDict({"secaggplus_configs": ConfigRecord({"stage": stage, **configs})})


class Cohort:
    """Devices of one SecAgg+ round, each with its node config and its run-long Flower state."""

    def __init__(self, model: Path, state: Path, ids: list[int], **node: Any) -> None:
        self.ids = ids
        self.config = run_config(model, state, secagg=True)
        self.nodes = {nid: cfg for nid, cfg in zip(ids, node_configs(model, state, len(ids), **node), strict=True)}
        self.states = {nid: RecordDict() for nid in ids}
        self.keys: dict[int, tuple[bytes, bytes]] = {}

    def send(self, nid: int, content: RecordDict) -> Message:
        return deliver(content, "train", self.nodes[nid], self.config, node_id=nid, state=self.states[nid])

    def to_collect(self) -> dict[int, tuple[list[int], list[bytes]]]:
        """Setup and share keys honestly; returns what each device gets in the collect stage."""
        for nid in self.ids:
            reply = self.send(nid, _setup(len(self.ids), len(self.ids), 2))
            assert not reply.has_error(), reply.error
            got = reply.content["secaggplus_configs"]
            self.keys[nid] = (got["pk1"], got["pk2"])
        inbox: dict[int, tuple[list[int], list[bytes]]] = {nid: ([], []) for nid in self.ids}
        keys = {str(nid): list(pair) for nid, pair in self.keys.items()}
        for nid in self.ids:
            reply = self.send(nid, _stage("share_keys", **keys))
            assert not reply.has_error(), reply.error
            got = reply.content["secaggplus_configs"]
            for dst, text in zip(got["dsts"], got["ctxts"], strict=True):
                inbox[dst][0].append(nid)
                inbox[dst][1].append(text)
        return inbox

    def collect(self, nid: int, sources: list[int], texts: list[bytes]) -> Message:
        """The collect stage as a legacy FitIns (what SecAgg+'s workflow sends): the device trains."""
        arrays, _ = v0_arrays(self.config)
        keys = sorted(arrays)
        ins = FitIns(ndarrays_to_parameters([arrays[k] for k in keys]), {"adapter-version": 0, "server-round": 1})
        content = compat.fitins_to_recorddict(ins, True)
        content.config_records["secaggplus_configs"] = ConfigRecord(
            {"stage": "collect_masked_vectors", "ctxts": texts, "srcs": sources}
        )
        return self.send(nid, content)


@pytest.mark.parametrize(
    ("sample", "shares", "threshold", "taken"),
    [
        (1, 1, 1, False),  # the attack: a cohort of one, whose own unmask reply is its self-mask seed
        (3, 3, 1, False),  # one share of three reconstructs
        (4, 4, 2, False),  # half: two disjoint halves could each rebuild one of a device's secrets
        (2, 2, 2, False),  # a cohort below the device's minimum of 3
        (3, 3, 4, False),  # more shares needed than exist
        (3, 3, "2", False),  # not a number
        (3, 3, 2, True),  # what Flower's workflow sends for 3 devices at threshold 0.67
        (5, 5, 3, True),
    ],
)
def test_the_device_refuses_a_cohort_or_threshold_that_hides_nothing(
    tiny_bpe_model: Path, tmp_path: Path, sample: int, shares: int, threshold: Any, taken: bool
) -> None:
    cohort = Cohort(tiny_bpe_model, tmp_path, [7])
    reply = cohort.send(7, _setup(sample, shares, threshold))
    assert reply.has_error() != taken
    if not taken:
        assert reply.error.reason == SecAggRefusal.public


def test_the_device_refuses_a_key_list_too_small_or_without_it(tiny_bpe_model: Path, tmp_path: Path) -> None:
    cohort = Cohort(tiny_bpe_model, tmp_path, [7])
    reply = cohort.send(7, _setup(3, 3, 2))
    mine = [reply.content["secaggplus_configs"]["pk1"], reply.content["secaggplus_configs"]["pk2"]]
    fake = [[bytes([i]) * 32, bytes([i + 1]) * 32] for i in (1, 3, 5)]
    for keys in (
        {"7": mine, "8": fake[0]},  # two devices: fewer than the device's minimum cohort
        {"8": fake[0], "9": fake[1], "10": fake[2]},  # the device left out
        {"7": mine, "8": fake[0], "08": fake[1]},  # one node twice, in two spellings
    ):
        reply = cohort.send(7, _stage("share_keys", **keys))
        assert reply.has_error() and reply.error.reason == SecAggRefusal.public


def test_a_node_listed_both_active_and_dead_gets_no_share(tiny_bpe_model: Path, tmp_path: Path) -> None:
    """The attack: listing the target X as active *and* dead to the two others made each return both
    of X's shares (self mask and pairwise key); the server rebuilt X's update alone."""
    ids = [2001, 2002, 2003]
    target = ids[0]
    cohort = Cohort(tiny_bpe_model, tmp_path, ids)
    inbox = cohort.to_collect()
    for nid in ids:
        reply = cohort.collect(nid, *inbox[nid])
        assert not reply.has_error(), reply.error
    other = ids[1]
    for active, dead in (
        (ids, [target]),  # X both active and dead
        ([*ids, 9999], []),  # a node outside the device's key list
        (ids[::2], [other]),  # the device itself, which is answering, listed as dead
        ([other, other, ids[2]], []),  # a node twice
    ):
        reply = cohort.send(other, _stage("unmask", active_nids=active, dead_nids=dead))
        assert reply.has_error() and reply.error.reason == SecAggRefusal.public, (active, dead)
    # The honest unmask stage (everyone finished) is answered: one self-mask share per active device.
    reply = cohort.send(other, _stage("unmask", active_nids=ids, dead_nids=[]))
    assert not reply.has_error(), reply.error
    assert list(reply.content["secaggplus_configs"]["nids"]) == ids


def test_a_stage_out_of_order_or_a_refused_round_is_one_sentence(tiny_bpe_model: Path, tmp_path: Path) -> None:
    """Flower's mod raised on what a server sent out of order: a traceback, with its text, left the device."""
    cohort = Cohort(tiny_bpe_model, tmp_path, [7])
    reply = cohort.send(7, _stage("unmask", active_nids=[7], dead_nids=[]))
    assert reply.has_error() and reply.error.reason == SecAggRefusal.public
    # A device that refuses the round itself (here: less noise than its minimum) says so, in its sentence.
    ids = [11, 12, 13]
    strict = Cohort(tiny_bpe_model, tmp_path / "strict", ids, **{"min-noise-multiplier": 2.0})
    inbox = strict.to_collect()
    reply = strict.collect(11, *inbox[11])
    assert reply.has_error() and reply.error.reason == PolicyRefusal.public


def test_a_device_that_requires_secure_aggregation_refuses_a_plain_round(tiny_bpe_model: Path, tmp_path: Path) -> None:
    nodes = node_configs(tiny_bpe_model, tmp_path, 3, **{"secagg-required": True})
    plain, _ = run_in_process(run_config(tiny_bpe_model, tmp_path, **{"min-clients": 3}), nodes)
    assert plain["rounds"][0]["refusals"] == [SecAggRefusal.public] * 3
    assert not (tmp_path / "device0" / "ledger.json").exists()
    secure, _ = run_in_process(run_config(tiny_bpe_model, tmp_path, secagg=True, **{"min-clients": 3}), nodes)
    assert secure["version_out"] == 1 and secure["rounds"][0]["replies"] == 3


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.625, 1.5])
def test_the_server_refuses_a_threshold_devices_would_refuse(tmp_path: Path, threshold: float) -> None:
    config = {"server-state-dir": str(tmp_path), "secagg": True, "secagg-threshold": threshold}
    with pytest.raises(ConfigError, match=r"secagg-threshold must be above 0\.625"):
        ServerSettings.from_run_config(config)
    # Above 0.625, Flower's threshold (round half to even of threshold x shares, at least 2) is more
    # than half the shares for every cohort (SecAggPlusWorkflow.setup_stage computes it so).
    for fraction in (0.626, 0.67, 1.0):
        assert ServerSettings.from_run_config({**config, "secagg-threshold": fraction}).secagg_threshold == fraction
        assert all(2 * max(round(fraction * shares), 2) > shares for shares in range(2, 500))
    assert 2 * max(round(0.625 * 4), 2) == 4  # 0.625 of 4 shares is 2: exactly half


# --- issue #50, finding 2: SecAgg+ keys bound to enrolled device identities ----------------------


def _sybil(nid: int, enrolled: NodeIdentity | None, *, run_id: int = 7, server_round: str = "1") -> list[bytes]:
    """A cohort member the server plays: SecAgg+ keys it made (so it holds their secret keys),
    bound to `enrolled` when given (an identity the server endorsed itself)."""
    from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes

    pk1, pk2 = (public_key_to_bytes(generate_key_pairs()[1]) for _ in range(2))
    if enrolled is None:
        return [pk1, pk2]
    return [pk1, pk2, *enrolled.bind(run_id=run_id, server_round=server_round, node_id=nid, pk1=pk1, pk2=pk2)]


@pytest.mark.parametrize("sybils", ["unbound", "self-enrolled", "replayed", "one-identity-twice"])
def test_a_cohort_the_server_fills_with_sybils_gets_no_share(tiny_bpe_model: Path, tmp_path: Path, sybils: str) -> None:
    """The measured attack: one real device and two nodes the server plays, threshold 2 of 3. The
    server held the Sybils' secret keys, decrypted the shares the device sent them and recovered its
    update to within 4e-6. Now the device checks every member's binding before any share leaves."""
    real = _enrolled(tmp_path / "deploy", ["real", "other"])
    ids = [11, 12, 13]
    cohort = Cohort(tiny_bpe_model, tmp_path, ids, **{"identity-dir": real["real"]})
    reply = cohort.send(11, _setup(3, 3, 2))
    assert not reply.has_error(), reply.error
    got = reply.content["secaggplus_configs"]
    mine = [got["pk1"], got["pk2"], *got[IDENTITY_KEY]]
    # The server's own enrollment: node keys it endorsed itself (what it can make without the operator's key).
    forged = provision_deployment(tmp_path / "server-deploy", ["s1", "s2"])
    forged_ids = [NodeIdentity.load(forged.devices[n]) for n in ("s1", "s2")]
    other = NodeIdentity.load(real["other"])  # a real device's identity, but the server lacks its key...
    if sybils == "unbound":
        entries = {12: _sybil(12, None), 13: _sybil(13, None)}
    elif sybils == "self-enrolled":
        entries = {12: _sybil(12, forged_ids[0]), 13: _sybil(13, forged_ids[1])}
    elif sybils == "replayed":
        # ...so it replays the real device's own binding on a Sybil's node id, with its own keys.
        entries = {12: [*_sybil(12, None), *mine[2:]], 13: _sybil(13, forged_ids[0])}
    else:
        # One enrolled device (were it the server's) seated twice: two members, one identity.
        entries = {12: _sybil(12, other), 13: _sybil(13, other)}
    keys = {"11": mine, **{str(n): e for n, e in entries.items()}}
    reply = cohort.send(11, _stage("share_keys", **keys))
    assert reply.has_error() and reply.error.reason == SecAggRefusal.public
    assert not reply.has_content()  # no share, encrypted or not, left the device
    why = {
        "unbound": "carry no binding",
        "self-enrolled": "not bound to an enrolled device identity",
        "replayed": "keys of node 12 are not bound",
        "one-identity-twice": "bound to one device identity",
    }[sybils]
    refused = [json.loads(line) for line in (tmp_path / "device0" / "rounds.jsonl").read_text().splitlines()]
    assert why in refused[-1]["cause"], refused[-1]
    # The same stage with the other members real enrolled devices is answered (the positive control).
    honest = {"11": mine}
    for nid, name in ((12, "other"),):
        honest[str(nid)] = _sybil(nid, NodeIdentity.load(real[name]))
    third = _enrolled(tmp_path / "deploy", ["third"])["third"]
    honest["13"] = _sybil(13, NodeIdentity.load(third))
    fresh = Cohort(tiny_bpe_model, tmp_path / "fresh", ids, **{"identity-dir": real["real"]})
    first = fresh.send(11, _setup(3, 3, 2)).content["secaggplus_configs"]
    honest["11"] = [first["pk1"], first["pk2"], *first[IDENTITY_KEY]]
    reply = fresh.send(11, _stage("share_keys", **honest))
    assert not reply.has_error(), reply.error
    assert sorted(reply.content["secaggplus_configs"]["dsts"]) == [12, 13]
