"""Issue 13 #12: `federation schedule` keeps going through a damaged store and a hung submission."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import specsteer.federation.deploy
from specsteer.federation.cli import main
from specsteer.federation.store import AdapterStore
from tests.federation.conftest import FIXTURE_USERS


def _schedule_in_thread(argv: list[str], limit: float = 120.0) -> int:
    """Run `federation schedule` in a thread, failing the test (not hanging it) if it never returns."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["code"] = main(argv)
        except BaseException as exc:
            result["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(limit)
    assert not worker.is_alive(), "the schedule hung"
    if "error" in result:
        raise AssertionError(f"the schedule died: {result['error']!r}") from result["error"]
    return int(result["code"])


def test_a_damaged_store_is_logged_retried_and_the_schedule_goes_on(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = AdapterStore(tmp_path / "server" / "adapters")
    store.save(0, {"a.lora_A.weight": np.zeros((2, 2), np.float32)}, {"r": 2}, base="x")
    (store.root / "v0" / "adapter_config.json").unlink()  # the damage the operator found

    code = _schedule_in_thread(
        ["schedule", "--every", "1s", "--max-runs", "2", "--retries", "1", "--retry-backoff", "0.1s",
         "--simulation", "--clients", "2", "--data", str(FIXTURE_USERS), "--model", str(tiny_bpe_model),
         "--state-dir", str(tmp_path), "--dp-steps", "1", "--personal-steps", "1"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err
    failures = [line for line in err.splitlines() if line.startswith("federation: run failed:")]
    # Two periods, each an attempt and one retry, each failure logged with its cause.
    assert len(failures) == 4, err
    assert all("global adapter v0 is damaged" in line and "adapter_config.json" in line for line in failures)
    assert err.count("retrying in 0.1 s (retry 1 of 1)") == 2


def test_a_hung_submission_meets_its_deadline_and_is_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    calls: list[float | None] = []

    def submit_run(superlink: str, config: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs.get("timeout"))
        if len(calls) == 1:
            release.wait(300)  # the first submission hangs, as `flwr run` did with no timeout
            return {"run_id": 1, "version_in": 0, "version_out": 0, "rounds": []}
        return {"run_id": len(calls), "version_in": 0, "version_out": 1, "rounds": []}

    monkeypatch.setattr(specsteer.federation.deploy, "submit_run", submit_run)
    try:
        code = _schedule_in_thread(
            ["schedule", "--every", "1m", "--max-runs", "1", "--run-timeout", "1s", "--retry-backoff", "0.2s",
             "--superlink", "127.0.0.1:9093", "--insecure", "--state-dir", str(tmp_path)]
        )  # fmt: skip
    finally:
        release.set()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "federation: run failed: the run did not finish within its deadline of 1 s" in err
    assert "retrying in 0.2 s" in err
    assert "run 2: global adapter v0 -> v1" in out  # the retry, within the same period
    assert calls == [1.0, 1.0]  # each submission was given the deadline (flwr run is killed at it)
