"""The witness's decisions: a sequence of Close witness requests against one fresh witness state.

The verifier is the witness of every device log that talks to it (`server.witness.Witness`): it
pins a device's log key at first sight and cosigns only consistent growth, refusing a rollback, a
fork, an inconsistent proof, a proof from another size than the last cosigned one, another log key
or a signature that does not verify. Each step is a Close uplink carrying a request, the device
(the name its certificate proved) and the witness's clock; the witness is the test-only key
`keys/test-witness.key`, so a cosignature (Ed25519 is deterministic) is the same bytes every time.
The logs are made-up leaf hashes: the witness judges roots and proofs, never records.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specsteer.core import wire
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.server.witness import Cosigned, Refused, Witness
from tools.conformance.common import ConformanceError, category, mismatch, text_form
from tools.conformance.keys import OTHER_KEY, TEST_KEY, TEST_WITNESS, history, signed_request

FILE = "witness/decisions.json"
DEVICE = "conformance-test-device"
OTHER_DEVICE = "conformance-other-device"
T0 = 1767225600  # 2026-01-01T00:00:00Z, the witness's clock at the first step


@dataclass(frozen=True)
class _Step:
    name: str
    description: str
    device: str
    time: int
    request: wire.WitnessRequest
    intent: str  # "cosigned" or the refusal's category


def _steps() -> list[_Step]:
    honest = history("conformance witness: honest", 12)
    # The same log rewritten from record 5 on: agrees with the honest one up to size 5 only.
    forked = honest[:5] + history("conformance witness: rewritten", 12)[5:]
    other = history("conformance witness: another device", 2)
    good = signed_request(TEST_KEY, honest, 12, 8)
    flipped = bytes([good.signature[0] ^ 1]) + good.signature[1:]
    return [
        _Step("first-sight", "a log the witness has never seen: its key is pinned and its checkpoint cosigned",
              DEVICE, T0, signed_request(TEST_KEY, honest, 3), "cosigned"),
        _Step("same-size", "the same checkpoint again (old size 3, no proof): cosigned again", DEVICE, T0 + 10,
              signed_request(TEST_KEY, honest, 3, 3), "cosigned"),
        _Step("consistent-growth", "size 7 with its RFC 9162 consistency proof from the cosigned size 3", DEVICE,
              T0 + 20, signed_request(TEST_KEY, honest, 7, 3), "cosigned"),
        _Step("clock-behind", "size 8 from 7 while the witness's clock reads earlier than its last cosignature: "
              "the timestamp stays at the last one's (a cosignature never goes back in time)", DEVICE, T0 + 5,
              signed_request(TEST_KEY, honest, 8, 7), "cosigned"),
        _Step("rollback", "size 5, smaller than the cosigned size 8", DEVICE, T0 + 30,
              signed_request(TEST_KEY, honest, 5), "witness-rollback"),
        _Step("fork-same-size", "size 8 again with another root: a second history under the cosigned size", DEVICE,
              T0 + 40, signed_request(TEST_KEY, forked, 8, 8), "witness-fork"),
        _Step("fork-inconsistent-proof", "size 12 from 8, signed by the log key over the rewritten history: its "
              "proof does not lead from the cosigned root", DEVICE, T0 + 50, signed_request(TEST_KEY, forked, 12, 8),
              "witness-inconsistent"),
        _Step("proof-from-another-size", "size 12 with a valid proof from size 3, but the last cosigned size is 8",
              DEVICE, T0 + 60, signed_request(TEST_KEY, honest, 12, 3), "witness-conflict"),
        _Step("wrong-log-key", "size 12 from 8, signed by another key under the same log name", DEVICE, T0 + 70,
              signed_request(OTHER_KEY, honest, 12, 8), "witness-key-changed"),
        _Step("bad-signature", "size 12 from 8 whose signature has one bit flipped", DEVICE, T0 + 80,
              replace(good, signature=flipped), "witness-bad-signature"),
        _Step("growth-after-refusals", "size 12 from 8, honest: the refusals changed nothing the witness holds",
              DEVICE, T0 + 90, good, "cosigned"),
        _Step("other-device-first-sight", "another device's log under another key: keys are pinned per device",
              OTHER_DEVICE, T0 + 100, signed_request(OTHER_KEY, other, 2), "cosigned"),
    ]  # fmt: skip


def _decision(result: Cosigned | Refused) -> dict[str, Any]:
    if isinstance(result, Refused):
        return {"decision": "refused", "category": category(result.reason)}
    # The timestamp is bytes 4 to 12 of the signature (C2SP tlog-cosignature/v1), stated for a reader.
    timestamp = int.from_bytes(result.signature[4:12], "big")
    return {"decision": "cosigned", "witness": result.witness, "timestamp": timestamp,
            "signature_hex": result.signature.hex()}  # fmt: skip


class _Replay:
    """A fresh witness with the test key, its state in a temporary folder and its clock set per step."""

    def __init__(self, folder: Path) -> None:
        self.now = 0
        self.witness = Witness(TEST_WITNESS, folder / "witness-state.json", clock=lambda: self.now)

    def decide(self, device: str, time: int, frame_hex: str) -> tuple[dict[str, Any], str | None]:
        frame = wire.decode_uplink(bytes.fromhex(frame_hex))
        if not isinstance(frame, wire.CloseFrame) or frame.witness is None:
            raise ConformanceError(f"{FILE}: a step's frame is not a Close carrying a witness request")
        self.now = time
        result = self.witness.cosign(device, frame.witness)
        return _decision(result), result.reason if isinstance(result, Refused) else None


def build() -> dict[str, Any]:
    steps = []
    with tempfile.TemporaryDirectory() as tmp:
        replay = _Replay(Path(tmp))
        for seq, step in enumerate(_steps(), start=1):
            raw = wire.encode_close(seq, step.request)
            expected, reason = replay.decide(step.device, step.time, raw.hex())
            got = expected.get("category", expected["decision"])
            if got != step.intent:
                raise ConformanceError(f"witness step {step.name!r} was written to be {step.intent}, "
                                       f"but the witness says {got} ({reason})")  # fmt: skip
            steps.append(
                {"name": step.name, "description": step.description, "device": step.device, "time": step.time,
                 "frame_hex": raw.hex(), "frame_text": text_form(pb.Uplink.FromString(raw)), "expected": expected}
            )  # fmt: skip
    vector = {"name": "one-witness", "description": "every decision of one witness, from a fresh state",
              "steps": steps}  # fmt: skip
    return {"kind": "witness-decisions", "function": "specsteer.server.witness.Witness.cosign",
            "witness_key": "keys/test-witness.pub", "vectors": [vector]}  # fmt: skip


def check(doc: dict[str, Any]) -> list[str]:
    problems = []
    for v in doc["vectors"]:
        with tempfile.TemporaryDirectory() as tmp:
            replay = _Replay(Path(tmp))
            for i, step in enumerate(v["steps"]):
                got, reason = replay.decide(step["device"], step["time"], step["frame_hex"])
                if got != step["expected"]:
                    why = f" (the witness says: {reason})" if reason else ""
                    what = f"step {i} ({step['name']}) decision"
                    problems.append(mismatch(FILE, v["name"], what, step["expected"], got) + why)
    return problems
