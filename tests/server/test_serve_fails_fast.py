"""`server serve` says no before it imports torch (issue #46), sizes its default session cap to the
memory, and logs "serving on" once, with timestamps.

A bad TLS folder, a port out of range, a bad TOML file or a port in use took 13-20 s, 7 s of CPU
and 400 MB, because torch and transformers were imported before anything was checked. Here each
is refused by a real `server serve` process with one sentence and exit code 1, and `-X importtime`
shows neither torch nor transformers was imported before the refusal (no wall-clock assertion)."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specsteer.server.config import MAX_SESSIONS, ServerConfig, load_config, max_sessions_for_memory
from specsteer.server.session import CloudVerifier
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import make_pki

ROOT = Path(__file__).resolve().parents[2]
GiB, MiB = 2**30, 2**20
MODEL_LIBRARIES = ("torch", "transformers", "accelerate", "safetensors")


def run_serve(*args: str, importtime: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`server serve ARGS` in its own process (with `-X importtime`: every import on stderr)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    flags = ["-X", "importtime"] if importtime else []
    cmd = [sys.executable, *flags, "-m", "specsteer.server.cli", "serve", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def split_importtime(stderr: str) -> tuple[set[str], list[str]]:
    """The modules `-X importtime` reports, and the other stderr lines."""
    modules, other = set(), []
    for line in stderr.splitlines():
        if line.startswith("import time:"):
            modules.add(line.rsplit("|", 1)[1].strip())
        elif line.strip():
            other.append(line)
    return modules, other


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):
    return make_pki(tmp_path_factory.mktemp("fails-fast"))


def test_a_bad_configuration_is_refused_in_one_sentence_before_torch_is_imported(tmp_path: Path, pki) -> None:
    bad_toml = tmp_path / "server.toml"
    bad_toml.write_text("[server\nport = 1\n", encoding="utf-8")
    empty_tls = tmp_path / "empty-tls"
    empty_tls.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases = {
            "a TLS folder that is not there": (["--tls-dir", str(tmp_path / "nonexistent"), "--port", "50999"], "TLS"),
            "a TLS folder without the files": (["--tls-dir", str(empty_tls), "--port", "0"], "server.pem"),
            "a port out of range": (["--tls-dir", str(pki.directory), "--port", "70000"], "70000"),
            "a bad TOML file": (["--config", str(bad_toml), "--tls-dir", str(pki.directory)], "not valid TOML"),
            "a port in use": (["--tls-dir", str(pki.directory), "--port", port], f"127.0.0.1:{port}"),
        }
        results = {what: (run_serve(*args), needle) for what, (args, needle) in cases.items()}
    for what, (result, needle) in results.items():
        modules, lines = split_importtime(result.stderr)
        assert result.returncode == 1, (what, result.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("server: error: "), (what, lines)
        assert needle in lines[0], (what, lines)
        assert "specsteer.server.config" in modules, what  # importtime did report the imports
        imported = sorted(m for m in MODEL_LIBRARIES if m in modules)
        assert not imported, f"{what}: {imported} imported before the refusal"


def test_the_serve_checks_import_no_model_library(pki) -> None:
    # What server.cli runs before it imports server.grpc_server, in a process of its own.
    script = (
        "import sys\n"
        "from specsteer.server.config import load_config\n"
        "from specsteer.server.preflight import check_config\n"
        f"check_config(load_config(None, {{'port': 0, 'cert': {str(pki.server_cert)!r}, "
        f"'key': {str(pki.server_key)!r}, 'client_ca': {str(pki.device_ca)!r}}}))\n"
        f"print(sorted(m for m in {MODEL_LIBRARIES!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the default session cap ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "per_session", "expected"),
    [
        (20 * GiB, 640 * MiB, 24),  # the machine: 64 would need 40 GiB, 20 GiB free
        (2000 * GiB, 640 * MiB, MAX_SESSIONS),  # plenty: the ceiling
        (100 * MiB, 640 * MiB, 1),  # not even one fits: one all the same (the warning says why)
        (None, 640 * MiB, MAX_SESSIONS),  # memory unreadable: as before
    ],
)
def test_the_default_session_cap_is_what_the_memory_holds(free: int | None, per_session: int, expected: int) -> None:
    sessions = max_sessions_for_memory(free, per_session)
    assert sessions == expected
    if free is not None and sessions > 1:
        assert sessions * per_session <= free  # so the default start has no KV warning


def test_the_default_session_cap_keeps_room_above_the_reserve() -> None:
    assert max_sessions_for_memory(100 * MiB, 640 * MiB, at_least=9) == 9


def test_only_an_unset_max_sessions_is_derived(tmp_path: Path) -> None:
    assert load_config(None).max_sessions_from_memory
    assert not load_config(None, {"max_sessions": 64}).max_sessions_from_memory
    path = tmp_path / "server.toml"
    path.write_text("[limits]\nmax_sessions = 64\n", encoding="utf-8")
    assert not load_config(path).max_sessions_from_memory
    path.write_text("[limits]\nworkers = 2\n", encoding="utf-8")
    assert load_config(path).max_sessions_from_memory
    assert not ServerConfig().max_sessions_from_memory  # built in code: taken as given


def test_a_default_start_sizes_its_sessions_to_the_memory_and_does_not_warn(char_tok, caplog, monkeypatch) -> None:
    from specsteer.server import grpc_server as main_mod

    cloud = CloudVerifier(tiny_lm(char_tok, seed=2, name="g"), tiny_lm(char_tok, seed=1, name="s"), seed=0)
    per_session = main_mod.session_kv_bytes(cloud)
    monkeypatch.setattr(main_mod, "available_bytes", lambda device: 10 * per_session)  # 7.5 sessions' budget
    with caplog.at_level(logging.INFO, logger="server"):
        sized = main_mod.size_sessions_to_memory(load_config(None), cloud)
        main_mod.warn_if_sessions_outgrow_memory(sized, cloud)
    assert sized.max_sessions == 7 and not sized.max_sessions_from_memory
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("max_sessions 7" in r.getMessage() for r in caplog.records)
    # An explicit cap wins, and still warns when the memory cannot hold it.
    caplog.clear()
    explicit = load_config(None, {"max_sessions": 64})
    with caplog.at_level(logging.WARNING, logger="server"):
        main_mod.warn_if_sessions_outgrow_memory(explicit, cloud)
    assert explicit.max_sessions == 64
    assert any("would need" in r.getMessage() for r in caplog.records)


# -- the start's log -----------------------------------------------------------------------------


def _serve_then_drain(tmp_path: Path, pki, char_tok, *flags: str) -> str:
    """`server serve` on two tiny models until it serves, then SIGTERM (a drain): all it printed."""
    models = save_tiny(tmp_path, char_tok, seed=1, name="s"), save_tiny(tmp_path, char_tok, seed=2, name="g")
    port_file = tmp_path / "port"
    log = tmp_path / "server.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "specsteer.server.cli", "serve", *flags, "--tls-dir", str(pki.directory)]
    cmd += ["--port", "0", "--generalist", str(models[1]), "--specialist", str(models[0])]
    cmd += ["--port-file", str(port_file), "--torch-threads", "1"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=sink)
        try:
            deadline = time.monotonic() + 180
            while not port_file.exists():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return log.read_text()


def test_serving_on_is_logged_once_with_timestamps(tmp_path: Path, pki, char_tok) -> None:
    text = _serve_then_drain(tmp_path, pki, char_tok)
    lines = [line for line in text.splitlines() if line.strip()]
    assert sum("serving on" in line for line in lines) == 1, lines
    stamped = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} server: [A-Z]+: ")
    ours = [line for line in lines if " server: " in line or line.startswith("server:")]
    assert ours and all(stamped.match(line) for line in ours), ours
    assert not [line for line in ours if "WARNING" in line and "KV" in line], ours


def test_a_port_whose_last_connections_linger_in_time_wait_is_not_refused(pki) -> None:
    """Issue 47 (a fleet's rolling restart): a replica restarted on its port was refused "Address
    already in use" for as long as its last connections stayed in TIME_WAIT (60 s on Linux), though
    gRPC's listener (SO_REUSEADDR) would bind it. A port another socket listens on is still refused."""
    from specsteer.core.errors import ConfigError
    from specsteer.server.preflight import check_before_loading

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        config = ServerConfig(host="127.0.0.1", port=port)
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            check_before_loading(config)  # listened on: refused
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its end of the port goes to TIME_WAIT
        time.sleep(0.1)
        client.close()
    check_before_loading(config)  # only TIME_WAIT left: as free as gRPC will find it


def test_server_quiet_still_prints_a_configuration_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specsteer.server.cli import main

    assert main(["serve", "--quiet", "--tls-dir", str(tmp_path / "nope"), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "the TLS folder" in err and "does not exist" in err and err.count("\n") == 1


@pytest.mark.slow
def test_server_quiet_serves_and_drains_without_progress_lines(tmp_path: Path, pki, char_tok) -> None:
    # Execute: start, wait until it serves (the port file), then drain (SIGTERM), which logs at INFO too.
    text = _serve_then_drain(tmp_path, pki, char_tok, "--quiet")
    # Assert: nothing at INFO.
    assert "serving on" not in text and " INFO: " not in text, text
