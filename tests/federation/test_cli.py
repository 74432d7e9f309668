"""The `federation` command line: simulation runs, schedule, status, and one-sentence errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specsteer.federation.cli import main, parse_duration
from specsteer.federation.rounds import RUN_LOG
from specsteer.federation.store import AdapterStore
from tests.federation.conftest import FIXTURE_USERS

FAST = ["--dp-steps", "1", "--personal-steps", "1", "--max-len", "256"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_simulation_then_status(tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    code, out, _ = _run(
        capsys, "run", "--simulation", "--rounds", "1", "--clients", "2", "--data", str(FIXTURE_USERS),
        "--model", str(tiny_bpe_model), "--state-dir", str(state), "--epsilon", "20", "--json", *FAST,
    )  # fmt: skip
    assert code == 0
    summary = json.loads(out)
    assert (summary["version_in"], summary["version_out"]) == (0, 1)
    assert summary["rounds"][0]["replies"] == 2
    assert sorted(p.name for p in (state / "devices").iterdir()) == ["u04", "u09"]

    code, out, _ = _run(capsys, "status", "--state-dir", str(state), "--json")
    assert code == 0
    status = json.loads(out)
    assert status["versions"] == [0, 1] and len(status["devices"]) == 2
    for device in status["devices"]:
        assert device["epsilon_budget"] == 20 and 0 < device["epsilon_spent"] < 20
        assert device["global_versions"] == [0, 1] and device["dp_rounds"] == 1

    code, out, _ = _run(capsys, "status", "--state-dir", str(state))
    assert code == 0 and "global adapter: v1" in out and "(δ=1e-05, rdp)" in out


def test_run_without_data_splits_the_demo_history(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(
        capsys, "run", "--simulation", "--clients", "2", "--model", str(tiny_bpe_model), "--state-dir", str(tmp_path),
        "--no-dp", *FAST,
    )  # fmt: skip
    assert code == 0, err
    assert "splitting the SDK's demo history 2 ways" in err
    assert "global adapter v0 -> v1" in out and "2 device(s) trained" in out


def test_schedule_runs_every_period_and_remembers_the_last_start(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "schedule", "--every", "1s", "--max-runs", "2", "--simulation", "--clients", "2", "--data", str(FIXTURE_USERS),
        "--model", str(tiny_bpe_model), "--state-dir", str(tmp_path), "--no-dp", *FAST,
    ]  # fmt: skip
    code, out, _ = _run(capsys, *args)
    assert code == 0
    assert "v0 -> v1" in out and "v1 -> v2" in out
    assert json.loads((tmp_path / "schedule.json").read_text())["last_start"] > 0

    # A restarted scheduler with a long period waits out the period instead of running at once,
    # and stops cleanly on SIGTERM (as systemd sends it).
    args[2], args[4] = "1h", "1"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from federation.cli import main; sys.exit(main())", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("federation: next run in 3") or line.startswith("federation: next run in 35"), line
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert AdapterStore(tmp_path / "server" / "adapters").latest() == 2  # no third run


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["run", "--rounds", "2"], 2, "one of the arguments --simulation --superlink is required"),
        (["run", "--simulation", "--rounds", "0"], 2, "must be at least 1"),
        (["run", "--superlink", "localhost"], 2, "not a HOST:PORT address"),
        (["schedule", "--every", "5x", "--simulation"], 2, "not a duration"),
        (["run", "--simulation", "--clients", "5", "--data", str(FIXTURE_USERS)], 1, "holds 3 users, fewer than the 5"),
        (["run", "--simulation", "--data", "/nonexistent/users.jsonl"], 1, "does not exist"),
        (["run", "--superlink", "127.0.0.1:9093"], 1, "needs --root-certificates"),
        (["run", "--superlink", "127.0.0.1:9093", "--insecure", "--data", "x.jsonl"], 1, "device settings"),
        (
            ["run", "--simulation", "--model", "no-such-model", "--data", str(FIXTURE_USERS)],
            1,
            "neither an existing path",
        ),
    ],
)
def test_bad_input_is_one_sentence_and_a_nonzero_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    try:
        got = main([*argv, "--state-dir", str(tmp_path)])
    except SystemExit as exc:  # argparse's usage errors
        got = int(exc.code or 0)
    err = capsys.readouterr().err
    assert got == code, err
    assert message in err and "Traceback" not in err
    if code == 1:
        errors = [line for line in err.splitlines() if line.startswith("federation: error:")]
        assert len(errors) == 1 and errors[0].endswith(".")


def test_a_state_dir_or_data_file_that_cannot_serve_is_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped state folder read as "no adapter yet" (exit 0), a file there and a damaged run log
    were tracebacks, and an empty data file made a run of refusals that exited 0."""
    a_file, empty, damaged = tmp_path / "notes.txt", tmp_path / "empty.json", tmp_path / "state"
    a_file.write_text("x")
    empty.write_text("")
    (damaged / "server").mkdir(parents=True)
    (damaged / "server" / RUN_LOG).write_text("{not json\n")
    cases = [
        (["status", "--state-dir", str(tmp_path / "no-such")], "is not a folder of federation state"),
        (["run", "--simulation", "--state-dir", str(a_file)], "is a file; the federation's state needs a folder"),
        (["run", "--simulation", "--data", str(empty), "--state-dir", str(tmp_path / "s")], "is empty"),
        (["status", "--state-dir", str(damaged)], "line 1 is not a JSON record of a run"),
    ]
    for argv, message in cases:
        code, _, err = _run(capsys, *argv)
        assert code == 1 and message in err and "Traceback" not in err, (argv, err)


def test_a_data_file_no_device_could_read_is_refused_before_the_run(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data file of no profile: every device used to refuse it in its round and the run exited 0;
    since the one reader (issue #46) the run refuses it before it starts, in one sentence."""
    data = tmp_path / "list.json"
    data.write_text("[1, 2]")
    code, out, err = _run(
        capsys, "run", "--simulation", "--data", str(data), "--model", str(tiny_bpe_model),
        "--state-dir", str(tmp_path / "s"), *FAST,
    )  # fmt: skip
    assert code == 1 and "round 1" not in out
    assert f"federation: error: Cannot read the data file {data}: entry [0] must be a JSON object" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_run_says_which_devices_trained_and_why_the_others_sat_out(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Devices that took no step learning from their data (no ε left, no usable sequence) answer
    like devices that trained (so the server cannot learn their history's size), and `run`
    printed "2 device(s) trained" and exited 0 for a run in which none had."""
    # u09's subjects alone fill max-len: it has no usable sequence; u04 trains.
    users = [json.loads(line) for line in FIXTURE_USERS.read_text().splitlines()[:2]]
    for entry in users[1]["profile"]:
        entry["subject"] = "x" * 3000
    data = tmp_path / "users.jsonl"
    data.write_text("".join(json.dumps(u) + "\n" for u in users))
    argv = ["run", "--simulation", "--data", str(data), "--model", str(tiny_bpe_model), *FAST]
    code, out, err = _run(capsys, *argv, "--state-dir", str(tmp_path / "mixed"))
    assert code == 0, err
    assert "round 1: 1 of 2 device(s) trained, 1 sat out (no usable sequence), v1\n" in out

    # A budget too small for one step: both devices send noise alone and the run says so, and fails.
    argv = ["run", "--simulation", "--data", str(FIXTURE_USERS), "--model", str(tiny_bpe_model), *FAST]
    code, out, err = _run(capsys, *argv, "--epsilon", "0.001", "--state-dir", str(tmp_path / "poor"))
    assert code == 1
    assert "round 1: 0 of 2 device(s) trained, 2 sat out (no private step within its ε budget" in out
    assert "v1, which learnt from no device's data" in out
    errors = [line for line in err.splitlines() if line.startswith("federation: error:")]
    assert errors == [
        "federation: error: no device trained in any of the run's 1 round(s) (2 sat out: no private step within "
        "its ε budget, its ε per round, δ or sampling-rate limit ×2), so v1 learnt from no device's data."
    ]
    code, out, _ = _run(capsys, *argv, "--epsilon", "0.001", "--state-dir", str(tmp_path / "poor"), "--json")
    (only,) = json.loads(out)["rounds"]
    assert code == 1 and only["replies"] == 2 and only["devices"]["trained"] == 0


def test_console_entry_point_exit_code_and_stderr(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from federation.cli import main; sys.exit(main())", "run", "--simulation",
         "--data", str(tmp_path / "missing.jsonl"), "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"federation: error: The data file {tmp_path / 'missing.jsonl'} does not exist."
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "text, seconds", [("90", 90), ("30s", 30), ("15m", 900), ("6h", 21600), ("1d", 86400), ("1h30m", 5400)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_run_simulation_with_secure_aggregation(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--simulation", "--secagg", "--data", str(FIXTURE_USERS), "--model", str(tiny_bpe_model)]
    # Devices refuse a SecAgg+ cohort below their secagg-min-cohort (3): said at once, in one sentence.
    code, out, err = _run(capsys, *argv, "--clients", "2", "--state-dir", str(tmp_path / "two"), "--json", *FAST)
    assert code != 0
    assert err.strip().splitlines()[-1] == "federation: error: --secagg needs at least 3 devices (--clients)."
    code, out, err = _run(capsys, *argv, "--clients", "3", "--state-dir", str(tmp_path), "--json", *FAST)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["secure_aggregation"] is True and summary["version_out"] == 1
    assert summary["rounds"][0]["replies"] == 3


def test_run_prints_each_round_as_it_ends(
    tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`federation run --simulation --rounds 2` printed two lines, then nothing until the run ended."""
    argv = ["run", "--simulation", "--rounds", "2", "--clients", "2", "--data", str(FIXTURE_USERS)]
    code, out, err = _run(
        capsys, *argv, "--model", str(tiny_bpe_model), "--state-dir", str(tmp_path), "--epsilon", "20", *FAST
    )
    assert code == 0, err
    lines = err.splitlines()
    ended = [n for n, line in enumerate(lines) if line.startswith("federation: round 1 of 2: 2 of 2 device(s) trained")]
    started = [n for n, line in enumerate(lines) if line.startswith("federation: round 2 of 2: sending v1")]
    # Round 1 is told as it ends, before round 2 starts: the devices, the version made, their ε.
    assert ended and started and ended[0] < started[0], err
    assert ", v1, mean personal loss " in lines[ended[0]] and ", mean ε spent per device " in lines[ended[0]]
    assert any(line.startswith("federation: round 2 of 2: 2 of 2 device(s) trained, v2, mean") for line in lines)
    # stdout is the result alone: the summary, which tells both rounds once more.
    assert "federation:" not in out and "round 2: 2 of 2 device(s) trained, v2" in out


def test_quiet_run_prints_no_progress(tiny_bpe_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--simulation", "--clients", "2", "--data", str(FIXTURE_USERS), "--no-dp", "--quiet"]
    code, out, err = _run(capsys, *argv, "--model", str(tiny_bpe_model), "--state-dir", str(tmp_path), *FAST)
    assert code == 0 and err == "" and "global adapter v0 -> v1" in out


def test_status_and_privacy_budget_agree_on_a_device_without_a_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After an interrupted run, `federation status` listed a device with "ε 0.000 of 8 (δ=1e-05,
    rdp), 0 DP round(s)" while `privacy budget` found no ledger: the device folder exists from the
    run's first message, the ledger only from the device's first DP step."""
    from specsteer.privacy.cli import main as privacy_main

    device = tmp_path / "devices" / "u04"
    device.mkdir(parents=True)
    (device / "global").mkdir()  # what a device keeps before it trains
    assert privacy_main(["budget", "--state-dir", str(tmp_path)]) == 1
    assert "no device privacy ledgers" in capsys.readouterr().err

    code, out, _ = _run(capsys, "status", "--state-dir", str(tmp_path))
    assert code == 0 and f"device {device}: no privacy ledger yet" in out and "ε 0.000" not in out
    code, out, _ = _run(capsys, "status", "--state-dir", str(tmp_path), "--json")
    (only,) = json.loads(out)["devices"]
    assert code == 0 and only["ledger"] is None
