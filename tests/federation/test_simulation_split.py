"""A simulation's devices keep their ledgers only for the split of the data they were charged for.

Before: each simulated device's state (its ε ledger) was ``devices/part<i>`` however many ways the
history was split, so ``--clients 1`` then ``--clients 2`` over one ``--state-dir`` let ``part1``
train on commits that ``part0`` had already spent ε on (composed ε 9.47 past a budget of 8).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specsteer.core.errors import ConfigError
from specsteer.federation.run_options import RunOptions
from specsteer.sdk.context import demo_profile_path
from tests.federation.conftest import FIXTURE_USERS


def _nodes(state: Path, clients: int, data: Path | None = None) -> list[str]:
    return [n["state-dir"] for n in RunOptions(state_dir=state, clients=clients, data=data).simulation_nodes()]


def test_another_number_of_shards_of_one_history_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (part0,) = _nodes(state, 1)
    Path(part0).mkdir(parents=True)  # the device trained and kept its ledger here
    assert _nodes(state, 1) == [part0]  # the same split again: the same ledgers
    with pytest.raises(ConfigError) as refused:
        _nodes(state, 2)
    message = str(refused.value)
    assert "another number of devices" in message and "new --state-dir" in message and message.count(". ") == 0
    assert _nodes(state, 1) == [part0]  # the recorded split still serves


def test_a_changed_history_is_refused_for_sharded_devices(tmp_path: Path) -> None:
    data = tmp_path / "user.json"
    shutil.copy(demo_profile_path(), data)
    state = tmp_path / "state"
    _nodes(state, 2, data)
    user = json.loads(data.read_text())
    user["profile"] = user["profile"][1:]  # every entry moves to another shard
    data.write_text(json.dumps(user))
    with pytest.raises(ConfigError, match="split from other data"):
        _nodes(state, 2, data)


def test_devices_from_before_the_split_was_recorded_are_refused(tmp_path: Path) -> None:
    (tmp_path / "devices" / "part0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="was not recorded"):
        _nodes(tmp_path, 2)


def test_devices_by_user_may_be_any_number(tmp_path: Path) -> None:
    one = _nodes(tmp_path, 1, FIXTURE_USERS)
    two = _nodes(tmp_path, 2, FIXTURE_USERS)
    assert two[0] == one[0] and len(two) == 2
