"""The device's draft step with the verifier beside it in one process: in process, and over gRPC.

    python -m bench.colocated_steps --specialist SPEC --generalist SPEC [--kv slots] [--sampling] [--queries 3]
        [--out docs/results]

`bench.speed` runs the device and a real verifier (gRPC, mutual TLS) in one process and holds each
row to a cost model whose draft step is timed alone. This generates the same queries three ways,
`specsteer` each time: with the cloud called in process (no network), over gRPC and TLS on
loopback, and in process again, and prints the median of the device's own forwards after its
prefill (`device_step_ms`, as `sdk generate --json` reports it) for each, beside the draft step
timed alone. Where the gRPC turn's steps are slower, the device's forwards share the cores with
the verifier's and gRPC's threads (every verdict's post-round work overlaps the next draft), which
the cost model's draft step, timed alone, does not see; `--device-threads` below the cores leaves them room. Writes
OUT/colocated_steps_<torch threads>threads.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence

import torch

from bench import speed
from specsteer.core.fileio import atomic_write
from specsteer.core.session_types import SessionParams
from specsteer.sdk.client import SpecSteerClient
from specsteer.sdk.decoding import Generation, generate

__all__ = ["main"]


def _median_step(runs: Sequence[Generation]) -> float:
    return statistics.median(r.stats.extra["device_step_ms"] for r in runs)


def main(argv: Sequence[str] | None = None) -> int:
    p = speed._parser()
    p.prog, p.description = "bench.colocated_steps", __doc__.splitlines()[0]
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.device_threads is not None:
        torch.set_num_threads(args.device_threads)
    bench = speed._prepare(args)
    alone = bench.measure()  # before any generation, as bench.speed times its costs
    params = SessionParams(gamma=0.5, draft_len=args.draft_len, sampling=args.sampling)
    steps: dict[str, float] = {}

    def in_process() -> list[Generation]:
        return [generate(bench.specialist, q, params, bench.options, bench.local) for q in bench.prompts]

    steps["in_process"] = _median_step(in_process())
    with speed._tls_verifier(bench) as (_, port, client_config, _payload):
        client = SpecSteerClient.connect(bench.specialist, client_config(port))
        with client:
            steps["grpc_tls"] = _median_step([client.generate(q, params, bench.options) for q in bench.prompts])
    steps["in_process_again"] = _median_step(in_process())
    result = {
        "command": "python -m bench.colocated_steps " + " ".join(sys.argv[1:] if argv is None else argv),
        "queries": len(bench.prompts),
        "torch_threads": torch.get_num_threads(),
        "draft_step_alone_ms": alone.draft_step * 1e3,
        "device_step_ms_median": steps,
    }
    name = f"colocated_steps_{result['torch_threads']}threads.json"
    atomic_write(args.out / name, json.dumps(result, indent=2) + "\n", mode=0o644)
    print(
        f"draft step timed alone {result['draft_step_alone_ms']:.2f} ms; the device's steps (median): "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in steps.items()),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
