"""Issue #50 finding 5: eligibility was a file nobody wrote.

The device policy (idle, charging, unmetered) read an ``eligibility-file`` that the OS was supposed
to write; nothing in the SDK let the embedding app report these states. Now the app calls
`report_state` (or, on the reference device, ``federation device-state``), written atomically with
the time it was reported, and a state older than ``eligibility-max-age`` is not eligible.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from specsteer.federation.budget_ledger import Ledger, LedgerError, SealedFileCounter, WriteCounter
from specsteer.federation.cli import main
from specsteer.federation.eligibility import (
    STATE_FILE,
    EligibilitySource,
    FileEligibility,
    FixedEligibility,
    read_state,
    report_state,
)
from specsteer.federation.errors import ConfigError, NotEligible
from specsteer.federation.participant import Device, EligibilityPolicy
from specsteer.privacy.vault import StaticKeyProvider
from tests.federation.conftest import FIXTURE_USERS


def _device(state: Path, **node: object) -> Device:
    return Device.from_node_config(
        {"data-file": str(FIXTURE_USERS), "partition-id": 0, "state-dir": str(state), **node}
    )


def test_the_state_the_app_reported_decides_eligibility(tmp_path: Path) -> None:
    device = _device(tmp_path / "device")
    report_state(idle=True, charging=False, unmetered=True, state_dir=device.state_dir)
    assert device.read_flags() == {"idle": True, "charging": False, "unmetered": True}
    with pytest.raises(NotEligible, match="not charging"):
        device.check_eligible(EligibilityPolicy())
    report_state(idle=True, charging=True, unmetered=True, state_dir=device.state_dir)
    device.check_eligible(EligibilityPolicy())  # re-read at every message


def test_a_stale_state_is_not_eligible(tmp_path: Path) -> None:
    device = _device(tmp_path / "device", **{"eligibility-max-age": 600})
    report_state(idle=True, charging=True, unmetered=True, state_dir=device.state_dir, now=time.time() - 601)
    assert device.read_flags() == {"idle": False, "charging": False, "unmetered": False}
    with pytest.raises(NotEligible):
        device.check_eligible(EligibilityPolicy())
    # Dated in the future (a clock set forward to keep a report fresh): not eligible either.
    report_state(idle=True, charging=True, unmetered=True, state_dir=device.state_dir, now=time.time() + 3600)
    with pytest.raises(NotEligible):
        device.check_eligible(EligibilityPolicy())


def test_an_eligibility_file_without_a_time_is_dated_by_its_modification(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_text(json.dumps({"idle": True, "charging": True, "unmetered": True}))
    source = FileEligibility(path, max_age_s=60)
    assert all(source.flags().values())
    old = time.time() - 120
    os.utime(path, (old, old))
    assert not any(source.flags().values())
    path.write_text("{not json")
    assert not any(source.flags().values())
    path.write_text(json.dumps({"idle": "yes", "charging": True, "unmetered": True, "reported_at": time.time()}))
    assert source.flags()["idle"] is False  # only a JSON true counts


def test_an_app_may_hand_the_device_its_own_source(tmp_path: Path) -> None:
    class OnBattery:
        def flags(self) -> dict[str, bool]:
            return {"idle": True, "charging": False, "unmetered": True}

    assert isinstance(OnBattery(), EligibilitySource) and isinstance(FixedEligibility({}), EligibilitySource)
    device = _device(tmp_path / "device")
    device.eligibility_source = OnBattery()
    with pytest.raises(NotEligible):
        device.check_eligible(EligibilityPolicy())


def test_report_state_takes_booleans_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        report_state(idle="yes", charging=True, unmetered=True, state_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        _device(tmp_path, **{"eligibility-max-age": "nan"})


def test_the_cli_writes_what_the_device_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "device"
    argv = ["device-state", "--state-dir", str(state), "--idle", "yes", "--charging", "no", "--unmetered", "yes"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["path"] == str(state / STATE_FILE)
    reported = read_state(state / STATE_FILE)
    assert reported is not None and reported.flags() == {"idle": True, "charging": False, "unmetered": True}
    assert abs(reported.reported_at - time.time()) < 60
    assert (state / STATE_FILE).stat().st_mode & 0o777 == 0o600
    assert _device(state).read_flags() == {"idle": True, "charging": False, "unmetered": True}
    # Also through the node config's eligibility-file.
    assert _device(tmp_path / "other", **{"eligibility-file": str(state / STATE_FILE)}).read_flags()["idle"]
    with pytest.raises(SystemExit) as exit_info:
        main(["device-state", "--state-dir", str(state), "--idle", "maybe", "--charging", "no", "--unmetered", "yes"])
    assert exit_info.value.code == 2


class PlatformCounter:
    """A counter kept outside the state folder, as an app's secure storage would keep it."""

    def __init__(self) -> None:
        self.value: tuple[str, int] | None = None

    def read(self) -> tuple[str, int] | None:
        return self.value

    def write(self, seal_id: str, seq: int) -> None:
        if self.value is not None and seq < self.value[1]:
            raise LedgerError("the platform's counter only goes up")
        self.value = (seal_id, seq)


def test_a_platform_counter_detects_the_whole_folder_rolled_back(tmp_path: Path) -> None:
    provider = StaticKeyProvider(b"k" * 32)
    counter = PlatformCounter()
    assert isinstance(counter, WriteCounter) and isinstance(SealedFileCounter(tmp_path / "x", provider), WriteCounter)
    path = tmp_path / "ledger.json"
    ledger = Ledger.load(path, epsilon_budget=8.0, delta=1e-5, key_provider=provider, counter=counter)
    ledger.record(run_id=1, server_round=1, adapter_version_in=0, history=[(1.0, 0.25, 1)], max_grad_norm=1.0)
    saved = path.read_bytes()  # the whole folder, copied
    ledger.record(run_id=1, server_round=2, adapter_version_in=1, history=[(1.0, 0.25, 1)], max_grad_norm=1.0)
    path.write_bytes(saved)  # ...and put back: the counter outside it still says one more write
    assert not (tmp_path / "ledger.json.seq").exists()
    with pytest.raises(LedgerError, match="rolled back"):
        Ledger.load(path, epsilon_budget=8.0, delta=1e-5, key_provider=provider, counter=counter)
