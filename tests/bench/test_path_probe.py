"""bench.path_probe: the path's round trip for a small message and for fusion's dense vector, over
TLS with the device's identity, through the delay relay, against servers really started."""

from __future__ import annotations

import grpc
import pytest

from bench.netdelay import DelayRelay
from bench.path_probe import MAX_PAYLOAD, PAYLOAD_METHOD, PayloadServer, payload_round_trip
from specsteer.sdk.client import ClientConfig
from specsteer.server.pki import init_pki, issue_device


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    pki = init_pki(tmp_path_factory.mktemp("probe") / "pki")
    cert, key = issue_device(pki.directory, "probe")
    return pki, cert, key


def _config(pki, port: int) -> ClientConfig:
    authority, cert, key = pki
    return ClientConfig(server=f"127.0.0.1:{port}", pins=authority.pins, cert=cert, key=key)


def test_a_vector_sized_answer_crosses_the_relay_and_costs_its_rtt(pki) -> None:
    authority = pki[0]
    with (
        PayloadServer(authority.server_cert, authority.server_key, authority.device_ca) as server,
        DelayRelay(server.port, rtt_ms=20) as relay,
    ):
        small = payload_round_trip(_config(pki, relay.port), 0, reps=5)
        vector = payload_round_trip(_config(pki, relay.port), 4 * 151_936, reps=5)
        carried = relay.downstream_bytes
    assert 0.020 <= small < 0.5 and 0.020 <= vector < 2.0  # at least the relay's RTT
    assert carried > 6 * 4 * 151_936  # six answers of 608 KB (one connecting, five timed) crossed it


def test_the_payload_server_requires_the_devices_certificate_and_a_sane_request(pki, tmp_path) -> None:
    authority = pki[0]
    with PayloadServer(authority.server_cert, authority.server_key, authority.device_ca) as server:
        identity = _config(pki, server.port).identity()
        # The server's roots but no client certificate: the handshake fails, as with the verifier.
        roots = grpc.ssl_channel_credentials(root_certificates=identity.pins.root_pem)
        anonymous = grpc.secure_channel(f"127.0.0.1:{server.port}", roots)
        with pytest.raises(grpc.RpcError) as unauthenticated:
            anonymous.unary_unary(PAYLOAD_METHOD)(b"\0\0\0\0", timeout=5)
        assert unauthenticated.value.code() is grpc.StatusCode.UNAVAILABLE
        anonymous.close()
        channel = grpc.secure_channel(f"127.0.0.1:{server.port}", identity.credentials())
        assert channel.unary_unary(PAYLOAD_METHOD)(b"\x10\0\0\0", timeout=5) == bytes(16)
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(PAYLOAD_METHOD)(b"nonsense", timeout=5)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        channel.close()
    with pytest.raises(ValueError, match=r"outside 0\.\."):
        payload_round_trip(_config(pki, 1), MAX_PAYLOAD + 1)
