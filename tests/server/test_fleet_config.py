"""Issue 47, Build 1: the shipped HAProxy configuration (deploy/haproxy.cfg) as deploy/fleet.py
renders it. HAProxy itself must accept it (`haproxy -c`); what it enforces is there; TLS is passed
through (the proxy holds no certificate or key); readiness is probed on each replica's plain HTTP
port. tests/server/test_fleet.py runs it for real (slow)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from deploy.fleet import Fleet, FleetError, ProxyLimits, bind_address, haproxy_binary, main


def _fleet(tmp_path: Path, **kw: object) -> Fleet:
    return Fleet(tmp_path / "state", replicas=3, port=50051, replica_ports=[(7001, 7101), (7002, 7102), (7003, 7103)],
                 **kw)  # type: ignore[arg-type]  # fmt: skip


def test_the_rendered_configuration_enforces_the_limits_and_passes_tls_through(tmp_path: Path) -> None:
    limits = ProxyLimits(per_source=16, rate_per_10s=50, hello_deadline=2.5, idle_timeout=90, maxconn=1000)
    text = _fleet(tmp_path, limits=limits).render()
    assert not re.search(r"\{\{\w+\}\}", text)
    assert re.search(r"^\s*mode tcp$", text, re.M)
    assert "tcp-request connection reject if { sc0_conn_cur gt 16 }" in text
    assert "tcp-request connection reject if { sc0_conn_rate gt 50 }" in text
    assert "tcp-request inspect-delay 2500ms" in text and "accept if { req.ssl_hello_type 1 }" in text
    assert "timeout client 90000ms" in text and "maxconn 1000" in text
    assert "option httpchk GET /readyz" in text and "http-check expect status 200" in text
    for i in range(3):
        assert f"server r{i} 127.0.0.1:{7001 + i} port {7101 + i}" in text
    # Passed through: no TLS is terminated here, so mutual TLS and pinning stay end to end.
    assert not re.search(r"\b(ssl|crt|ca-file|verify)\b", re.sub(r"#.*", "", text).replace("ssl_hello_type", ""))


@pytest.mark.skipif(haproxy_binary() is None, reason="haproxy is not installed (`make install` installs it)")
def test_haproxy_accepts_the_rendered_file(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    fleet.check_config()
    out = subprocess.run(["haproxy", "-c", "-f", str(fleet.config_path)], capture_output=True, text=True)
    assert out.returncode == 0 and "[WARNING]" not in out.stdout + out.stderr, out.stdout + out.stderr


def test_an_any_address_bind_is_dual_stack() -> None:
    assert bind_address("::", 50051) == ":::50051 v4v6"
    assert bind_address("0.0.0.0", 50051) == "0.0.0.0:50051"
    assert bind_address("::1", 50051) == "[::1]:50051"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--per-source", "0"], "per-source must be at least 1"),
        (["--hello-deadline", "0"], "hello-deadline must be a positive number"),
        (["--replicas", "0"], "at least 1 replica"),
    ],
)
def test_bad_limits_are_one_sentence_and_exit_1(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    assert main(["render", "--state-dir", str(tmp_path), *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_render_prints_the_configuration(tmp_path: Path, capsys) -> None:
    assert main(["render", "--state-dir", str(tmp_path), "--replicas", "2", "--replica-port", "6000"]) == 0
    out = capsys.readouterr().out
    assert "server r0 127.0.0.1:6000 port 6100" in out and "server r1 127.0.0.1:6001 port 6101" in out
    with pytest.raises(FleetError):
        ProxyLimits(maxconn=0)


def test_every_replica_reads_the_one_adapter_store_and_writes_its_named_transcript(tmp_path: Path) -> None:
    from deploy.fleet import _fleet, _parser

    store = tmp_path / "adapters"
    args = _parser().parse_args(
        ["run", "--state-dir", str(tmp_path / "s"), "--tls-dir", str(tmp_path), "--adapters-dir", str(store)]
    )
    fleet = _fleet(args)
    for r in fleet.replicas:
        cmd = fleet._replica_command(r)
        assert cmd[cmd.index("--adapters-dir") + 1] == str(store.resolve())
        assert cmd[cmd.index("--replica") + 1] == r.name
        assert cmd[cmd.index("--transcript-dir") + 1] == str(fleet.transcripts)
