"""Issue 30 #5: a scheduled attempt that times out publishes nothing, and its retry starts clean.

The device's DP training hangs in the first attempt (a patched `train_global_dp`, as in
test_rounds) until the scheduler has given up on it; then it finishes, as a real hung device
eventually does. Everything else is the project's real scheduler, ServerApp and ClientApps.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flwr.supercore.task_identity import TaskIdentity

import specsteer.federation.participant
from specsteer.federation.attempts import ATTEMPT_FILE, TOKEN_KEY, Attempt, publishing
from specsteer.federation.budget_ledger import Ledger
from specsteer.federation.errors import AttemptRevoked
from specsteer.federation.simulation import _server_identity, run_in_process
from specsteer.federation.store import AdapterStore
from tests.federation.conftest import FIXTURE_USERS, node_configs, run_config
from tests.federation.test_schedule import _schedule_in_thread


def _revoked(server: Path) -> bool:
    try:
        return json.loads((server / ATTEMPT_FILE).read_text()).get("revoked") is True
    except (OSError, ValueError):
        return False


def _ledger_rounds(folder: Path) -> list[tuple[int, int, int]]:
    data = json.loads((folder / "ledger.json").read_text())
    return [(r["run_id"], r["server_round"], r["adapter_version_in"]) for r in data["rounds"]]


def test_a_hung_device_times_out_publishes_nothing_and_the_retry_publishes_once(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = tmp_path / "server"
    real = specsteer.federation.participant.train_global_dp
    calls: list[str] = []
    finished_late = threading.Event()

    def hang_first_call(sw: Any, train_set: Any, cfg: Any, ledger: Ledger | None, **kwargs: Any) -> Any:
        calls.append(str(ledger.path.parent if ledger is not None else ""))
        if len(calls) > 1:
            return real(sw, train_set, cfg, ledger, **kwargs)
        # Hung until the scheduler gives up on the attempt; then it trains and replies after all.
        limit = time.time() + 120
        while not _revoked(server) and time.time() < limit:
            time.sleep(0.05)
        result = real(sw, train_set, cfg, ledger, **kwargs)
        finished_late.set()
        return result

    monkeypatch.setattr(specsteer.federation.participant, "train_global_dp", hang_first_call)
    code = _schedule_in_thread(
        ["schedule", "--every", "10m", "--max-runs", "1", "--run-timeout", "10s", "--retries", "2",
         "--retry-backoff", "0.1s", "--simulation", "--clients", "2", "--data", str(FIXTURE_USERS),
         "--model", str(tiny_bpe_model), "--state-dir", str(tmp_path), "--dp-steps", "1",
         "--personal-steps", "1", "--max-len", "256"],
        limit=240.0,
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, err
    failures = [line for line in err.splitlines() if line.startswith("federation: run failed:")]
    assert failures == [
        "federation: run failed: the run did not finish within its deadline of 10 s; it was cancelled and "
        "nothing it finishes later is published"
    ], err
    assert "TaskIdentity" not in err
    assert "run " in out and "global adapter v0 -> v1" in out  # the retry succeeded

    # The hung device did finish its training after the deadline, and the retry waited for it.
    assert finished_late.is_set()
    assert not [t for t in threading.enumerate() if t.name == "federation-run"]

    # One published version for the one round, by the retry; nothing by the abandoned attempt.
    store = AdapterStore(server / "adapters")
    assert store.versions() == [0, 1]
    runs = [json.loads(line) for line in (server / "runs.jsonl").read_text().splitlines() if line.strip()]
    assert len(runs) == 1 and (runs[0]["version_in"], runs[0]["version_out"]) == (0, 1)
    retry = runs[0]["run_id"]
    v1 = store.get(1).manifest
    assert (v1["run_id"], v1["server_round"], v1["parent_version"], v1["devices"]) == (retry, 1, 0, 2)

    # The ledgers agree with that history: each device spent once for v1 (trained from v0 in the
    # retry). The hung device also spent for the abandoned attempt, whose run published nothing.
    devices = sorted(p for p in (tmp_path / "devices").iterdir() if p.is_dir())
    ledgers = {d: _ledger_rounds(d) for d in devices}
    assert all(rounds.count((retry, 1, 0)) == 1 for rounds in ledgers.values())
    hung = Path(calls[0])
    abandoned = [r for r in ledgers[hung] if r[0] != retry]
    assert len(abandoned) == 1 and abandoned[0][1:] == (1, 0)
    assert abandoned[0][0] not in {run["run_id"] for run in runs}
    assert all(store.get(v).manifest.get("run_id") != abandoned[0][0] for v in store.versions())
    others = [rounds for d, rounds in ledgers.items() if d != hung]
    assert others == [[(retry, 1, 0)]]  # the other device never trained in the cancelled attempt


def test_a_revoked_attempt_cannot_publish_even_when_its_run_completes(
    tiny_bpe_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with a SuperLink's ServerApp, which outlives the killed `flwr run`: no cancel reaches it."""
    server = tmp_path / "server"
    attempt = Attempt.open(server)
    real = specsteer.federation.participant.train_global_dp

    def revoke_while_training(sw: Any, train_set: Any, cfg: Any, ledger: Ledger | None, **kwargs: Any) -> Any:
        attempt.revoke()  # the deadline passes while the devices train
        return real(sw, train_set, cfg, ledger, **kwargs)

    monkeypatch.setattr(specsteer.federation.participant, "train_global_dp", revoke_while_training)
    config = run_config(tiny_bpe_model, tmp_path, **{TOKEN_KEY: attempt.token, "dp-steps": 1, "personal-steps": 1})
    with pytest.raises(AttemptRevoked, match="may no longer publish"):
        run_in_process(config, node_configs(tiny_bpe_model, tmp_path))
    assert AdapterStore(server / "adapters").versions() == [0]  # v0 is the deterministic start, not a round
    assert not (server / "runs.jsonl").exists()
    # The devices did train and release their arrays to the server, so their ledgers say so.
    assert all(len(_ledger_rounds(tmp_path / f"device{i}")) == 1 for i in range(2))


def test_a_token_without_its_lease_publishes_nothing(tiny_bpe_model: Path, tmp_path: Path) -> None:
    config = run_config(tiny_bpe_model, tmp_path, **{TOKEN_KEY: "f" * 32, "dp-steps": 1, "personal-steps": 1})
    with pytest.raises(AttemptRevoked):
        run_in_process(config, node_configs(tiny_bpe_model, tmp_path))
    assert AdapterStore(tmp_path / "server" / "adapters").versions() == [0]


def test_a_new_attempt_supersedes_the_previous_one(tmp_path: Path) -> None:
    first = Attempt.open(tmp_path)
    with publishing(tmp_path, first.token, "v1"):
        pass
    second = Attempt.open(tmp_path)
    with pytest.raises(AttemptRevoked), publishing(tmp_path, first.token, "v2"):
        pass
    assert first.revoke() == [] and not second.cancelled.is_set()  # revoking a superseded one changes nothing
    with publishing(tmp_path, second.token, "v2"):
        pass
    assert second.revoke() == ["v2"] and second.cancelled.is_set()
    with pytest.raises(AttemptRevoked), publishing(tmp_path, second.token, "v3"):
        pass
    with publishing(tmp_path, None, "v3"):  # an unscheduled `federation run` is not gated
        pass


def test_overlapping_simulations_never_unset_flowers_task_identity() -> None:
    """The cause of `RuntimeError: TaskIdentity.run_id is not set` in the third attempt."""
    before = TaskIdentity._run_id
    with _server_identity(1):
        with _server_identity(2):
            assert TaskIdentity.run_id == 2
        # The abandoned run (started first) ends while the retry (started second) still runs.
        assert TaskIdentity.run_id in (1, 2)
    assert TaskIdentity._run_id == before
