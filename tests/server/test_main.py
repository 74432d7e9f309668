"""The verifier as a program: TOML config with overrides, `server pki ...`, refusing bad TLS files,
health check, Prometheus metrics over HTTP, certificate reloads that refuse broken files, and the
per-stream transcript of received uplinks."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from specsteer.audit.identity import DeviceIdentity
from specsteer.core import wire
from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server import pki as pki_mod
from specsteer.server.cli import main
from specsteer.server.config import ServerConfig, load_config
from specsteer.server.grpc_server import create_server
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, identity, make_pki, remote, serve, server_config


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")


@pytest.fixture
def cloud(models) -> CloudVerifier:
    return CloudVerifier(models[1], models[0], seed=0, max_top_k=64)


# -- config ---------------------------------------------------------------------------------------


def test_toml_config_with_overrides_and_relative_paths(tmp_path) -> None:
    # Prepare
    path = tmp_path / "conf" / "server.toml"
    path.parent.mkdir()
    path.write_text(
        '[server]\nport = 6000\n[models]\ngeneralist = "g-model"\n'
        '[tls]\ncert = "pki/server.pem"\nkey = "/abs/server.key"\nclient_ca = "pki/device-ca.pem"\n'
        'revoked_devices = ["lost-phone"]\n[limits]\nmax_sessions = 3\nidle_timeout = 5\n[metrics]\nport = 0\n'
    )
    # Execute
    config = load_config(path, {"port": 7000, "max_sessions": None, "workers": 2})
    # Assert: the file, then non-None overrides; relative paths against the file's folder.
    assert (config.port, config.generalist, config.max_sessions, config.workers) == (7000, "g-model", 3, 2)
    assert config.cert == path.parent / "pki" / "server.pem" and config.key == Path("/abs/server.key")
    assert config.idle_timeout == 5.0 and config.metrics_port == 0 and config.revoked_devices == ("lost-phone",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[serverr]\nport = 1\n", "unknown section \\[serverr\\]"),
        ("[server]\nprot = 1\n", "unknown key 'prot' in \\[server\\]"),
        ('[server]\nport = "1"\n', "must be an integer"),
        ("[server]\nport = 70000\n", "port must be in"),
        ("[limits]\nidle_timeout = -1\n", "idle_timeout must be a positive"),
        ("[limits]\nmax_top_k = 65\n", "max_top_k must be in \\[1, 64\\]"),
        ("[tls]\nrevoked_devices = 3\n", "list of device names"),
        # A revocation no device name can match would leave the device it meant connected.
        ('[tls]\nrevoked_devices = ["Alice"]\n', "revoked device 'Alice' is not a device name"),
        ('[tls]\nrevoked_devices = ["alice "]\n', "revoked device 'alice ' is not a device name"),
        ("[server\n", "not valid TOML"),
    ],
)
def test_bad_config_files_are_named(tmp_path, text, message) -> None:
    path = tmp_path / "server.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


# -- the CLI ----------------------------------------------------------------------------------------


def test_pki_commands_make_a_working_pki(tmp_path, capsys) -> None:
    d = tmp_path / "pki"
    assert main(["pki", "init", "--dir", str(d)]) == 0
    assert main(["pki", "issue-device", "--dir", str(d), "--name", "alice"]) == 0
    assert {p.name for p in d.iterdir()} >= {"ca.pem", "backup-ca.pem", "server.pem", "device-ca.pem", "pins.txt"}
    device = pki_mod.load_issued(d / "devices", "alice").cert
    assert device.issuer == pki_mod.load_issued(d, "device-ca").cert.subject
    # Refusals are one sentence, exit 1.
    capsys.readouterr()
    assert main(["pki", "init", "--dir", str(d)]) == 1
    assert "already holds a PKI" in capsys.readouterr().err
    assert main(["pki", "issue-device", "--dir", str(d), "--name", "alice"]) == 1
    assert "already has a certificate" in capsys.readouterr().err
    assert main(["pki", "issue-device", "--dir", str(d), "--name", "Bad Name"]) == 1
    assert "a device name is" in capsys.readouterr().err
    assert main(["pki", "issue-device", "--dir", str(tmp_path / "nope"), "--name", "bob"]) == 1
    assert "run `server pki init" in capsys.readouterr().err


def test_serve_refuses_to_start_without_tls_or_with_bad_tls_files(tmp_path, capsys) -> None:
    p = make_pki(tmp_path)
    # No TLS at all.
    assert main(["serve", "--port", "0"]) == 1
    assert "TLS is required" in capsys.readouterr().err
    # An expired server certificate.
    ca = pki_mod.load_issued(p.directory, "ca")
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    pki_mod.write_issued(tmp_path, "expired", pki_mod.issue_leaf(ca, "v", hosts=["127.0.0.1"], not_before=old, days=1))
    tls = ["--key", str(tmp_path / "expired.key"), "--client-ca", str(p.device_ca)]
    assert main(["serve", "--port", "0", "--cert", str(tmp_path / "expired.pem"), *tls]) == 1
    assert "is not valid now" in capsys.readouterr().err
    # A key that is not the certificate's.
    assert main(["serve", "--port", "0", "--cert", str(p.server_cert), *tls]) == 1
    err = capsys.readouterr().err
    assert "is not the key of the certificate" in err and "Traceback" not in err


# -- the running server -----------------------------------------------------------------------------


def test_the_health_service_answers_devices_it_serves_with_a_check_and_no_watch(tmp_path, cloud) -> None:
    # A revoked device used to get SERVING, and any device could hold Watch streams open by the
    # thousand until gRPC's shared call limit refused every other device's session.
    p = make_pki(tmp_path, devices=("alice", "mallory"))
    server, port = create_server(server_config(p, revoked_devices=("mallory",)), cloud=cloud)
    channels = {
        name: grpc.secure_channel(f"127.0.0.1:{port}", identity(p, name).credentials()) for name in ("alice", "mallory")
    }
    request = health_pb2.HealthCheckRequest(service=wire.SERVICE_NAME)
    try:
        server.start()
        alice, mallory = (health_pb2_grpc.HealthStub(channels[name]) for name in ("alice", "mallory"))
        assert alice.Check(request, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as refused:
            mallory.Check(request, timeout=5)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "revoked" in refused.value.details()
        with pytest.raises(grpc.RpcError) as watch:
            next(iter(alice.Watch(request, timeout=5)))
        assert watch.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "Check only" in watch.value.details()
        # A Check whose request never comes is refused at its start, not held until it does: held,
        # such calls from a revoked device filled gRPC's shared call limit.
        silent = threading.Event()

        def never() -> Iterator[bytes]:
            silent.wait(10)
            yield b""

        half_open = channels["mallory"].stream_unary("/grpc.health.v1.Health/Check")
        with pytest.raises(grpc.RpcError) as held:
            half_open(never(), timeout=5)
        silent.set()
        assert held.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # By its path: a client with a newer health stub than grpcio-health-checking 1.81 has can ask.
        listing = channels["alice"].unary_unary("/grpc.health.v1.Health/List")
        with pytest.raises(grpc.RpcError) as listed:
            listing(b"", timeout=5)
        assert listed.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "Check only" in listed.value.details()  # not "Unexpected <class 'NotImplementedError'>"
    finally:
        server.stop(grace=0)
        for channel in channels.values():
            channel.close()


def test_health_check_and_metrics_endpoint(tmp_path, cloud, models) -> None:
    p = make_pki(tmp_path)
    server, port = create_server(server_config(p, metrics_port=0), cloud=cloud)
    channel = grpc.secure_channel(f"127.0.0.1:{port}", identity(p).credentials())
    check = health_pb2_grpc.HealthStub(channel).Check
    try:
        server.start()
        # Execute
        for service in ("", wire.SERVICE_NAME):
            assert check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == 1  # SERVING
        with remote(port, p, vocab_size=models[0].vocab_size) as verifier:
            out = generate(Specialist(models[0]), "Hi there", SessionParams(gamma=0.05), DecodeOptions(8), verifier)
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.stop(grace=0)
        channel.close()
    # Assert: what the device saw is what the server counted.
    assert f"specsteer_rounds_total {float(out.stats.rounds)}" in text
    assert f"specsteer_drafted_tokens_total {float(out.stats.drafted)}" in text
    assert f"specsteer_accepted_tokens_total {float(out.stats.accepted)}" in text
    assert 'specsteer_sessions_total{outcome="closed"} 1.0' in text
    assert "specsteer_round_latency_seconds_count" in text and "specsteer_batch_size_count" in text
    assert "specsteer_sessions_active 0.0" in text


def test_a_broken_certificate_rotation_is_refused_and_serving_goes_on(tmp_path, cloud) -> None:
    p = make_pki(tmp_path)
    with serve(cloud, p) as (server, port):
        # A new certificate whose key never arrives: the server keeps its current one.
        stray = pki_mod.issue_leaf(pki_mod.load_issued(p.directory, "ca"), "v", hosts=["127.0.0.1"])
        p.server_cert.write_bytes(stray.chain_pem)
        with remote(port, p, vocab_size=99) as verifier:
            verifier.open([10, 11], SessionParams()).close()
        assert server.metrics.value("specsteer_cert_reloads_total", {"result": "refused"}) == 1
        assert server.metrics.value("specsteer_cert_reloads_total", {"result": "ok"}) == 0


def test_transcript_holds_the_hash_of_every_uplink_received(tmp_path, cloud, models) -> None:
    p = make_pki(tmp_path)
    tap = RecordingTap()
    with (
        serve(cloud, p, transcript_dir=tmp_path / "transcripts") as (_, port),
        remote(port, p, vocab_size=models[0].vocab_size, tap=tap) as verifier,
    ):
        generate(Specialist(models[0]), "Hi there", SessionParams(gamma=0.05), DecodeOptions(8), verifier)
    lines = [json.loads(x) for x in (tmp_path / "transcripts" / "server-transcript.jsonl").read_text().splitlines()]
    assert lines[0] == {"format": "specsteer-server-transcript/2"}
    uplinks = [x for x in lines[1:] if "sha256" in x]
    assert [x["sha256"] for x in uplinks] == [hashlib.sha256(u).hexdigest() for u in tap.uplinks]
    assert len({x["stream"] for x in lines[1:]}) == 1 and len(tap.uplinks) > 2
    # Which device sent the stream (its certificate, as the device's audit log binds it), and its end.
    alice = DeviceIdentity.from_pem(p.device_cert("alice").read_bytes())
    assert lines[1] == {"stream": uplinks[0]["stream"], "device": "alice", "cert_sha256": alice.cert_sha256}
    assert lines[-1] == {"stream": uplinks[0]["stream"], "end": "closed", "uplinks": len(tap.uplinks)}


def test_config_requires_tls_before_models_load(tmp_path) -> None:
    with pytest.raises(ConfigError, match="TLS is required: set cert, key, client_ca"):
        create_server(ServerConfig(port=0))


def test_the_metrics_endpoint_holds_a_bounded_number_of_connections_and_drops_silent_ones(monkeypatch) -> None:
    # prometheus_client's own server gave each connection a thread, with no timeout: ~980 idle
    # connections left the verifier 27 descriptors.
    from specsteer.server import metrics as metrics_mod

    monkeypatch.setattr(metrics_mod._QuietHandler, "timeout", 0.5)
    m = metrics_mod.Metrics()
    port = m.serve("127.0.0.1", 0)
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(60)]
    try:
        time.sleep(0.2)
        # Each connection served holds two threads: its handler and its whole-connection deadline.
        assert threading.active_count() - before <= 2 * metrics_mod._MAX_CONNECTIONS
        idle[0].settimeout(30)
        assert idle[0].recv(1) == b""  # a silent connection is closed after the timeout
    finally:
        for s in idle:
            s.close()
    # A peer that sends a header line now and then (slowloris) is cut at the same bound.
    slow = socket.create_connection(("127.0.0.1", port), timeout=5)
    slow.sendall(b"GET /metrics HTTP/1.1\r\n")
    cut = False
    give_up = time.monotonic() + 30  # the deadline is 0.5 s; a loaded machine may take longer to act
    while not cut and time.monotonic() < give_up:
        time.sleep(0.3)  # within the per-read timeout: only a whole-connection deadline cuts it
        try:
            slow.sendall(b"X-Slow: 1\r\n")
        except OSError:
            cut = True
    slow.close()
    assert cut
    time.sleep(0.7)  # the held ones time out too
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert b"specsteer_rounds_total" in response.read()
    m.stop()


def test_a_server_whose_sessions_could_outgrow_the_memory_says_so_at_start(cloud, caplog, monkeypatch) -> None:
    # 64 sessions of a 1.5B Generalist at the protocol's longest need ~43 GB of KV: nothing said so.
    from specsteer.server import grpc_server as main_mod

    p_config = main_mod.ServerConfig(max_sessions=64)
    need = main_mod.warn_if_sessions_outgrow_memory(p_config, cloud)
    assert need > 0
    monkeypatch.setattr(main_mod, "available_bytes", lambda device: need - 1)
    with caplog.at_level(logging.WARNING, logger="server"):
        main_mod.warn_if_sessions_outgrow_memory(p_config, cloud)
    assert any("would need" in r.getMessage() and "--kv slots" in r.getMessage() for r in caplog.records)
    caplog.clear()
    monkeypatch.setattr(main_mod, "available_bytes", lambda device: need)
    main_mod.warn_if_sessions_outgrow_memory(p_config, cloud)
    assert not caplog.records


@pytest.mark.parametrize("what", ["the service", "the metrics", "transcript", "adapters"])
def test_what_would_fail_after_the_models_load_is_refused_before(tmp_path, monkeypatch, what) -> None:
    # A port in use, or a transcript folder that cannot be made, showed only after the models
    # loaded (minutes with real ones), in gRPC's "Failed to bind ... set GRPC_VERBOSITY=debug".
    from specsteer.server import grpc_server as main_mod

    def loaded(config):
        raise AssertionError("the models were loaded first")

    monkeypatch.setattr(main_mod, "build_cloud", loaded)
    p = make_pki(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        overrides = {
            "the service": {"port": port},
            "the metrics": {"metrics_port": port},
            "transcript": {"transcript_dir": blocker / "transcripts"},
            "adapters": {"adapters_dir": tmp_path / "no-such-folder"},
        }[what]
        message = {"transcript": "transcript directory", "adapters": "global adapters folder"}.get(what, f"for {what}")
        with pytest.raises(ConfigError, match=message):
            create_server(server_config(p, **overrides))
