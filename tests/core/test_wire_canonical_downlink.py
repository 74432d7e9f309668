"""A downlink has one encoding per content, with or without an audit log (the session contract
refused a non-canonical one only when a log was kept; the device's parser took it)."""

from __future__ import annotations

import pytest

from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.session_types import SteeringVector, Verdict


def test_a_non_canonical_downlink_is_refused_by_the_devices_parser() -> None:
    canonical = wire.encode_downlink(1, Verdict(0, SteeringVector(((5,),), (0.0,))))
    assert wire.decode_downlink(canonical, max_top_k=2, vocab_size=10)[0] == 1
    # A repeated seq field parses to its last value: the bytes before it could carry anything.
    for raw in (b"\x08\x07" + canonical, canonical + b"\x08\x01"):
        with pytest.raises(ProtocolError, match="canonical"):
            wire.decode_downlink(raw, max_top_k=2, vocab_size=10)
