"""The wire format: serde pairs round-trip, bounds are enforced at parse time, stubs match the .proto."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from specsteer.core import wire
from specsteer.core.errors import ConfigError, ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams, SteeringVector, Verdict

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "params",
    [
        SessionParams(),
        SessionParams(gamma=math.inf, alpha=1.78, top_k=64, draft_len=8, policy=CandidatePolicy.LITERAL),
        SessionParams(method=Method.SD, gamma=0.0, bonus=False, draft_len=1, adapter_version=7),
        SessionParams(method=Method.FUSION, draft_len=0, sampling=True, gamma=0.000001),
        SessionParams(method=Method.LLM, draft_len=0, alpha=0.0),
        SessionParams(certainty=0.6, gamma_uncertain=0.05, gamma=0.7),  # the certainty gate
        SessionParams(gamma_form=0.0),  # the form rule at 0: present on the wire, not "off"
        SessionParams(gamma_form=0.05, certainty=0.6, gamma_uncertain=0.2),  # the form rule beside the gate
    ],
)
def test_params_round_trip(params: SessionParams) -> None:
    msg = pb.Uplink.FromString(wire.open_to_proto([1, 2, 3], params).SerializeToString())
    assert wire.params_from_proto(msg.open.params) == params
    assert list(msg.open.prompt_ids) == [1, 2, 3]


def test_the_paper_rules_open_has_the_bytes_it_had_before_the_certainty_gate() -> None:
    """With the gate off the Open carries neither gate field, so a device or verifier that predates
    it, and every recorded log and conformance vector, sees the same bytes."""
    msg = wire.params_to_proto(SessionParams(gamma_uncertain=0.3))
    before = pb.SessionParams(method=pb.METHOD_SPECSTEER, gamma_ppm=500_000, alpha_milli=1000, top_k=10, draft_len=4)
    before.policy, before.bonus = pb.CANDIDATE_POLICY_GUARDRAIL, True
    assert msg.SerializeToString(deterministic=True) == before.SerializeToString(deterministic=True)
    assert wire.params_from_proto(msg) == SessionParams()
    assert not msg.HasField("gamma_form_ppm")  # nor the form rule's field


def test_device_only_methods_have_no_wire_form() -> None:
    with pytest.raises(ConfigError, match="device only"):
        wire.params_to_proto(SessionParams(method=Method.SLM_RAG))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": 0}, "unknown method"),
        ({"method": 1, "policy": 9}, "unknown candidate policy"),
        ({"method": 1, "policy": 1, "gamma_infinite": True, "gamma_ppm": 5}, "both set"),
        ({"method": 1, "policy": 1, "alpha_milli": 10_001, "top_k": 1, "draft_len": 1}, "alpha"),
        ({"method": 1, "policy": 1, "top_k": 0, "draft_len": 1}, "top-k"),
        ({"method": 1, "policy": 1, "top_k": 1, "draft_len": 33}, "draft length"),
        ({"method": 2, "policy": 1, "top_k": 1, "draft_len": 1, "sampling": True}, "greedy mode only"),
        ({"method": 1, "policy": 1, "top_k": 1, "draft_len": 1, "certainty_ppm": 1_000_001}, "certainty must be"),
        (
            {
                "method": 1,
                "policy": 1,
                "top_k": 1,
                "draft_len": 1,
                "certainty_ppm": 1,
                "gamma_uncertain_ppm": 2**32 - 1,
            },
            "gamma_uncertain",
        ),
        ({"method": 2, "policy": 1, "top_k": 1, "draft_len": 1, "certainty_ppm": 500_000}, "certainty gate"),
        ({"method": 1, "policy": 1, "top_k": 1, "draft_len": 1, "gamma_form_ppm": 2**32 - 1}, "gamma_form must be"),
        ({"method": 2, "policy": 1, "top_k": 1, "draft_len": 1, "gamma_form_ppm": 0}, "form rule"),
    ],
)
def test_out_of_range_params_are_protocol_errors(fields: dict, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        wire.params_from_proto(pb.SessionParams(**fields))


def test_verdict_round_trip_keeps_values_exactly_in_fp32() -> None:
    verdict = Verdict(2, SteeringVector(((5,), (6, 7)), (-0.25, 1.5)))
    down = wire.verdict_to_proto(3, verdict).SerializeToString()
    assert wire.verdict_from_proto(pb.Downlink.FromString(down), max_top_k=2, vocab_size=10) == verdict


def test_verdict_without_candidates_means_the_text_ended() -> None:
    msg = wire.verdict_to_proto(1, Verdict(3, None))
    assert wire.verdict_from_proto(msg, max_top_k=10, vocab_size=10) == Verdict(3, None)


@pytest.mark.parametrize(
    ("candidates", "message"),
    [
        ([pb.Candidate(token_ids=[1], value=0.0)] * 3, "more than k"),
        ([pb.Candidate(token_ids=[], value=0.0)], "has 0 tokens"),
        ([pb.Candidate(token_ids=[1] * 9, value=0.0)], "has 9 tokens"),
        ([pb.Candidate(token_ids=[10], value=0.0)], "outside the vocabulary"),
        ([pb.Candidate(token_ids=[1], value=float("nan"))], "non-finite"),
        ([pb.Candidate(token_ids=[1], value=float("inf"))], "non-finite"),
    ],
)
def test_bad_downlinks_are_refused_on_the_device(candidates: list, message: str) -> None:
    msg = pb.Downlink(seq=1, accepted=0, candidates=candidates)
    with pytest.raises(ProtocolError, match=message):
        wire.verdict_from_proto(msg, max_top_k=2, vocab_size=10)


def test_committed_stubs_match_a_fresh_protoc_run(tmp_path: Path) -> None:
    # The stubs are committed; regenerate them and compare, as `make proto` would.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            "specsteer/core/proto/verifier.proto",  # through the one import root, as `make proto` does
        ],
        cwd=ROOT,
        check=True,
    )
    for name in ("verifier_pb2.py", "verifier_pb2.pyi", "verifier_pb2_grpc.py"):
        fresh = (tmp_path / "specsteer" / "core" / "proto" / name).read_text()
        assert fresh == (ROOT / "core" / "proto" / name).read_text(), f"{name} is stale: run `make proto`"


def test_uplink_schema_has_no_string_bytes_or_float_fields() -> None:
    # Only token IDs and bounded integers/enums/bools may go up; the one exception is the Close's
    # witness request (the audit log's own checkpoint, every byte of it recomputed by `audit verify`).
    from google.protobuf.descriptor import FieldDescriptor as F

    # fixed32 is uint32 at a constant width (PaddedRound: the size channel closes).
    allowed = {F.TYPE_UINT32, F.TYPE_FIXED32, F.TYPE_BOOL, F.TYPE_ENUM, F.TYPE_MESSAGE}
    witness = {F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_UINT64}
    seen = set()

    def walk(desc) -> None:
        if desc.full_name in seen:
            return
        seen.add(desc.full_name)
        for field in desc.fields:
            ok = allowed | witness if desc.full_name == "specsteer.v1.WitnessRequest" else allowed
            assert field.type in ok, f"{desc.full_name}.{field.name} has a forbidden type"
            if field.type == F.TYPE_MESSAGE:
                walk(field.message_type)

    walk(pb.Uplink.DESCRIPTOR)
    assert "specsteer.v1.SessionParams" in seen and "specsteer.v1.WitnessRequest" in seen


def test_a_witness_request_with_an_oversized_field_is_refused_at_the_boundary() -> None:
    """Each byte field of a Close's witness request has exactly its size: none can carry text."""
    from specsteer.core.wire import WitnessRequest, decode_uplink, encode_close

    good = WitnessRequest("device.test/log", b"k" * 32, 5, b"r" * 32, b"s" * 64, 3, (b"p" * 32,))
    assert decode_uplink(encode_close(4, good)).witness == good  # type: ignore[union-attr]
    for bad in (
        WitnessRequest("my secret notes", b"k" * 32, 5, b"r" * 32, b"s" * 64),
        WitnessRequest("device.test/log", b"k" * 33, 5, b"r" * 32, b"s" * 64),
        WitnessRequest("device.test/log", b"k" * 32, 5, b"r" * 32, b"s" * 64 + b"hidden"),
        WitnessRequest("device.test/log", b"k" * 32, 5, b"r" * 32, b"s" * 64, 3, (b"p" * 31 + b"hidden",)),
        WitnessRequest("device.test/log", b"k" * 32, 5, b"r" * 32, b"s" * 64, 6),
    ):
        with pytest.raises(ProtocolError, match="witness request is malformed"):
            decode_uplink(encode_close(4, bad))


def test_core_wire_is_the_only_module_that_imports_the_stubs() -> None:
    """The README's promise: everything else reaches the generated messages through `core.wire`."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    importers = []
    for package in ("core", "sdk", "server", "audit", "privacy", "federation", "demo", "bench"):
        for path in sorted((root / package).rglob("*.py")):
            if "_pb2" in path.name or path == root / "core" / "wire.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                if any(n == "specsteer.core.proto" or n.startswith("specsteer.core.proto.") for n in names):
                    importers.append(str(path.relative_to(root)))
    assert importers == []
