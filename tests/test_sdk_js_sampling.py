"""The TypeScript device samples as the Python device does (issue #52): the same scripted drafter and
verifier on both sides, and every sampled generation (seeds, temperatures; recovery among top-k
candidates with alpha 1 and alpha 0, token-level fusion, the drafter alone) gives the same tokens
from the TypeScript session loop (sdk-js/src/session.ts, run by node on the built package) as from
the Python device's loops (`sdk.decoding._steered_loop`, `_local_loop`, as `generate` runs them with
`device_rng(seed)`). So the TypeScript device draws from the same generator, in the same order, by
the same rule. The rows are small and their weights far from any boundary's rounding: a draw that
hangs on exp's last bit is conformance/v1/steering/draws.json's concern. Needs the built package
(`make test-js` builds it before `make test-fast`)."""

from __future__ import annotations

import json
import math
import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from numpy.typing import NDArray

from specsteer.core.recovery import RULED_OUT, device_rng
from specsteer.core.session_types import FusionVector, Method, SessionParams, SteeringVector, Verdict
from specsteer.sdk.decoding import DecodeOptions, _local_loop, _State, _steered_loop, _Uplink

SDK_JS = Path(__file__).resolve().parent.parent / "sdk-js"
DIST = SDK_JS / "dist"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (DIST / "src").is_dir(),
    reason="the TypeScript package is not built (make test-js builds sdk-js/dist)",
)

# sdk-js/test/fake-verifier.ts's table: a drafter that puts 0.85 on draftNext(last) and 0.01 elsewhere,
# and a Generalist whose next token is targetNext(last).
V = 16
EOS = 15
TOKENS = 24
PROMPT = [7]
OFFER = (-0.3, 3.0, 3.4, RULED_OUT)  # four candidates' values: with alpha 1 or 0, none has most of the mass


def draft_next(x: int) -> int:
    return (x * 5 + 3) % 14


def target_next(x: int) -> int:
    return 2 if x == 6 else EOS if x == 11 else draft_next(x)


def fusion_values(nxt: int) -> list[float]:
    return [RULED_OUT if j == 13 else -0.25 * ((j + nxt) % 5) for j in range(V)]


class _TableSequence:
    """fake-verifier.ts's `TableSequence`, as the Python loops read a sequence."""

    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = list(ids)
        self.forward_seconds: list[float] = []

    def __len__(self) -> int:
        return len(self.ids)

    def next_logprobs(self) -> NDArray[np.float32]:
        row = np.full(V, math.log(0.01), dtype=np.float32)
        row[draft_next(self.ids[-1])] = math.log(0.85)
        return row

    def push(self, tokens: Sequence[int]) -> None:
        self.ids += list(tokens)

    def truncate(self, n: int) -> None:
        del self.ids[n:]

    def score_continuations(self, candidates: Sequence[Sequence[int]]) -> NDArray[np.float32]:
        row = self.next_logprobs()
        assert all(len(c) == 1 for c in candidates)
        return np.asarray([row[c[0]] for c in candidates], dtype=np.float32)


class _Session:
    """The node script's verifier: it accepts the draft's prefix its Generalist agrees with, then
    offers four candidates (the Generalist's next token first; the last ruled out) or, for fusion, a
    dense vector."""

    uplink_bytes = 0
    downlink_bytes = 0

    def __init__(self, fusion: bool) -> None:
        self.context = list(PROMPT)
        self.fusion = fusion

    def round(self, commit: list[int], draft: list[int], literal: list[int]) -> Verdict:
        self.context += [*commit, *literal]
        accepted = 0
        while accepted < len(draft) and draft[accepted] == target_next(self.context[-1]):
            self.context.append(draft[accepted])
            accepted += 1
        nxt = target_next(self.context[-1])
        if self.fusion:
            return Verdict(accepted, FusionVector(struct.pack(f"<{V}f", *fusion_values(nxt))))
        candidates = tuple(((nxt + k) % 14,) for k in range(len(OFFER)))
        return Verdict(accepted, SteeringVector(candidates, tuple(float(np.float32(v)) for v in OFFER)))


SCENARIOS: dict[str, dict[str, Any]] = {
    "alpha-1": {"method": "specsteer", "alpha_milli": 1000, "draft_len": 4},
    "alpha-0": {"method": "specsteer", "alpha_milli": 0, "draft_len": 4},
    "fusion": {"method": "fusion", "alpha_milli": 1000, "draft_len": 0},
    "alone": {"method": "specsteer", "alpha_milli": 1000, "draft_len": 4, "unreachable": True},
}
SEEDS = (0, 3, 42, 2**40 + 1)
TEMPERATURES = (1.0, 0.7, 1.3)


def python_tokens(scenario: dict[str, Any], seed: int, temperature: float) -> list[int]:
    fusion = scenario["method"] == "fusion"
    params = SessionParams(
        method=Method.FUSION if fusion else Method.SPECSTEER,
        sampling=True,
        alpha=scenario["alpha_milli"] / 1000,
        top_k=1 if fusion else len(OFFER),
        draft_len=scenario["draft_len"],
    )
    options = DecodeOptions(max_new_tokens=TOKENS, temperature=temperature, seed=seed)
    seq = _TableSequence(PROMPT)
    rng = device_rng(options.seed)
    state = _State(frozenset(), options.max_new_tokens, None, V)
    if not scenario.get("unreachable"):
        uplink = _Uplink(cast(Any, _Session(fusion)), None, cast(Any, None))
        assert _steered_loop(uplink, cast(Any, seq), params, options, state, rng) is None
    _local_loop(cast(Any, seq), True, options, state, rng)
    return state.generated


NODE = """
const dist = %(dist)s;
const { create, toBinary } = await import("@bufbuild/protobuf");
const { CandidateSchema, DownlinkSchema, FusionVectorSchema } = await import(dist + "/src/gen/verifier_pb.js");
const { generate } = await import(dist + "/src/session.js");
const { FrameQueue, VerifierLost } = await import(dist + "/src/transport.js");
const { decodeUplink, DEFAULT_PARAMS, Method } = await import(dist + "/src/wire.js");
const { drafter, targetNext, V } = await import(dist + "/test/fake-verifier.js");
const OFFER = %(offer)s;
const fusionValues = (nxt) =>
  Float32Array.from({ length: V }, (_, j) => (j === 13 ? OFFER[3] : -0.25 * ((j + nxt) %% 5)));
function verifier(fusion) {
  return { open() {
    const q = new FrameQueue();
    let context = [];
    return Promise.resolve({
      send(frame) {
        const f = decodeUplink(frame, V);
        if (f.kind === "open") context = [...f.promptIds];
        if (f.kind === "close") return q.end();
        if (f.kind !== "round") return;
        context.push(...f.commit);
        let accepted = 0;
        const last = () => context[context.length - 1];
        while (accepted < f.draft.length && f.draft[accepted] === targetNext(last())) context.push(f.draft[accepted++]);
        const nxt = targetNext(last());
        const answer = { seq: f.seq, accepted };
        if (fusion) answer.fusion = create(FusionVectorSchema, { values: new Uint8Array(fusionValues(nxt).buffer) });
        const candidate = (value, k) => create(CandidateSchema, { tokenIds: [(nxt + k) %% 14], value });
        if (!fusion) answer.candidates = OFFER.map(candidate);
        q.push(toBinary(DownlinkSchema, create(DownlinkSchema, answer)));
      },
      receive: (ms) => q.next(ms),
      close: () => Promise.resolve(),
      cancel: () => q.fail(new VerifierLost("verifier-lost", "cancelled")),
    });
  } };
}
const unreachable = { open: () => Promise.reject(new VerifierLost("verifier-unreachable", "no verifier")) };
const out = {};
for (const [name, s] of Object.entries(%(scenarios)s)) {
  const fusion = s.method === "fusion";
  const params = { ...DEFAULT_PARAMS, method: fusion ? Method.FUSION : Method.SPECSTEER, sampling: true,
                   alphaMilli: s.alpha_milli, draftLen: s.draft_len, topK: fusion ? 1 : OFFER.length };
  for (const seed of %(seeds)s) {
    for (const temperature of %(temperatures)s) {
      const options = { guard: "off", maxNewTokens: %(tokens)d, eosIds: new Set(), vocabSize: V, roundTimeoutMs: 5000,
                        seed: BigInt(seed), temperature };
      const transport = s.unreachable ? unreachable : verifier(fusion);
      const g = await generate(drafter, %(prompt)s, %(prompt)s, params, options, transport);
      out[`${name}/${seed}/${temperature}`] = { tokens: g.tokenIds, fallback: g.stats.fallback };
    }
  }
}
console.log(JSON.stringify(out));
"""


def test_the_typescript_device_samples_the_python_devices_tokens() -> None:
    script = NODE % {
        "dist": json.dumps(DIST.as_uri()),
        "offer": json.dumps([float(np.float32(v)) for v in OFFER]),
        "scenarios": json.dumps(SCENARIOS),
        "seeds": json.dumps([str(s) for s in SEEDS]),
        "temperatures": json.dumps(TEMPERATURES),
        "tokens": TOKENS,
        "prompt": json.dumps(PROMPT),
    }
    run = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=SDK_JS,  # @bufbuild/protobuf from the package's node_modules
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    typescript = json.loads(run.stdout)
    texts = set()
    for name, scenario in SCENARIOS.items():
        for seed in SEEDS:
            for t in TEMPERATURES:
                got = typescript[f"{name}/{seed}/{t if t != 1.0 else 1}"]
                want = python_tokens(scenario, seed, t)
                assert got["tokens"] == want, f"{name}, seed {seed}, temperature {t}"
                assert got["fallback"] == ("verifier-unreachable" if scenario.get("unreachable") else None)
                texts.add(tuple(want))
    # Sampled, not one-hot: the generations differ from each other.
    assert len(texts) > len(SCENARIOS) * len(SEEDS)
