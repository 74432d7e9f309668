"""The timing probe of issue #50, finding 4: does a round's time tell a small history from a large one?

    python -m bench.federation_round_time [--model PATH | --tiny DIR] [--sizes 2,36] [--repetitions 6]
        [--dp-steps 8] [--personal-steps 4] [--out docs/results/federation_round_time]

For each repetition, and for each history size in turn (interleaved, so drift in the machine's
load hits every size alike), one device with that many usable commits (plus the 4 held out) and a
fresh state folder answers one train message: `Device.train_round` in process, with the model
already loaded (what a SuperNode's ClientApp does after loading it), timed with
`time.perf_counter`. Prints and writes (JSON + md) each size's times and their range, and whether
the ranges overlap. `--tiny DIR` writes the tests' tiny Llama over the 400-token test BPE to DIR
and uses it (the model `tests/federation` trains).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsteer.privacy.profile_format import read_users

ROOT = Path(__file__).resolve().parents[1]
USERS = ROOT / "tests" / "fixtures" / "users.jsonl"
HOLDOUT = 4


def _history(folder: Path, usable: int) -> Path:
    entries = [e for u in read_users(USERS, what="the fixture") for e in u.stored_entries]
    if usable + HOLDOUT > len(entries):
        raise SystemExit(f"the fixture holds {len(entries)} entries; at most {len(entries) - HOLDOUT} usable")
    path = folder / f"history-{usable}.json"
    path.write_text(json.dumps({"user_id": f"user-{usable}", "profile": entries[: usable + HOLDOUT]}))
    return path


def _tiny_model(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.tinymodels import SAMPLE_TEXTS, bpe_tokenizer, save_tiny

    return save_tiny(folder, bpe_tokenizer(SAMPLE_TEXTS), seed=3, name="tiny-bpe", hidden=32, heads=2)


def one_round(
    model: Path, history: Path, state: Path, dp_steps: int, personal_steps: int, quantum: float = 0.0
) -> tuple[float, int]:
    """Seconds one train round takes on a device with a fresh state, and its usable commits."""
    import numpy as np

    from specsteer.federation.participant import Device, EligibilityPolicy
    from specsteer.federation.task import GLOBAL, TaskConfig, specialist_for

    run = {
        "model": str(model),
        "max-len": 256,
        "context-chars": 200,
        "dp-steps": dp_steps,
        "personal-steps": personal_steps,
        "lora-rank": 2,
        "lora-alpha": 4,
        "lora-targets": "q_proj,v_proj",
        "batch-size": 4,
        "lr": 0.05,
        "personal-lr": 0.01,
    }
    node = {
        "data-file": str(history),
        "state-dir": str(state),
        "model": str(model),
        "epsilon-budget": 8,
        "max-sample-rate": 1,
        "max-epsilon-per-round": 8,
        "round-time-quantum": quantum,
    }
    device = Device.from_configs(node, run)
    sw = specialist_for(TaskConfig.from_run_config(run))
    arrays = {k: np.zeros_like(v) if "lora_B" in k else v for k, v in sw.get_adapter(GLOBAL).items()}
    policy = EligibilityPolicy.from_run_config({})
    started = time.perf_counter()
    device.train_round(arrays, 0, policy=policy, run_id=1, server_round=1, base=sw.fingerprint)
    seconds = time.perf_counter() - started
    (event,) = [e for e in device.read_log() if e.get("event") == "train"]
    return seconds, int(event["examples"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.federation_round_time", description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a model folder (default: --tiny)")
    parser.add_argument("--tiny", type=Path, help="write the tests' tiny model here and use it")
    parser.add_argument("--sizes", default="2,36", help="usable commits of each history (default 2,36)")
    parser.add_argument("--repetitions", type=int, default=6)
    parser.add_argument("--dp-steps", type=int, default=8)
    parser.add_argument("--personal-steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument(
        "--quantum", type=float, default=0.0, help="the device's round-time-quantum in seconds (default 0: off)"
    )
    parser.add_argument("--label", default="", help="a name for this measurement in the output")
    parser.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    import torch

    from specsteer.federation.offline import go_offline

    go_offline()
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="round-time-"))
    try:
        model = args.model or _tiny_model(args.tiny or work / "model")
        histories = {n: _history(work, n) for n in sizes}
        for i in range(args.warmup):
            one_round(model, histories[sizes[0]], work / f"warm{i}", args.dp_steps, args.personal_steps)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for rep in range(args.repetitions):
            for n in sizes:
                seconds, examples = one_round(
                    model, histories[n], work / f"r{rep}-n{n}", args.dp_steps, args.personal_steps, args.quantum
                )
                assert examples == n, (examples, n)
                times[n].append(round(seconds, 4))
                print(f"rep {rep}: n = {n}: {seconds:.3f} s", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ranges = {n: (min(t), max(t)) for n, t in times.items()}
    lows = sorted(ranges.values())
    overlap = all(lows[i][1] >= lows[i + 1][0] for i in range(len(lows) - 1))
    result: dict[str, Any] = {
        "label": args.label,
        "command": "python -m bench.federation_round_time " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "model": "tests' tiny Llama (400-token BPE)" if args.model is None else str(args.model),
        "dp_steps": args.dp_steps,
        "personal_steps": args.personal_steps,
        "repetitions": args.repetitions,
        "round_time_quantum_s": args.quantum,
        "times_s": {str(n): t for n, t in times.items()},
        "range_s": {str(n): list(r) for n, r in ranges.items()},
        "ranges_overlap": overlap,
        "machine": f"{platform.machine()}, {platform.python_version()}, torch {torch.__version__}, 1 thread",
    }
    lines = [f"n = {n}: {lo:.3f}-{hi:.3f} s" for n, (lo, hi) in ranges.items()]
    lines.append("ranges overlap" if overlap else "ranges do NOT overlap: the time separates the sizes")
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
