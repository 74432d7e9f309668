"""Issue 27's "Must show", read off the JSON files a GPU run wrote: each criterion with its figure,
its target and whether it holds, so that a GPU session's note quotes one command's output.

    python -m bench.gpu_verdict --gpu OUT/next/gpu.json [--gpu docs/results/gpu.json] \\
        [--cloud-round OUT/e2e/cloud_round.json] [--e2e OUT/e2e/speed_gpu.json] \\
        [--projection docs/results/gpu_projection.json] [--out DIR]

- `--gpu` (bench.gpu, one or more; for each configuration the last file that measured it counts,
  so each ratio comes from one run): the Qwen3-32B step and 5-token block within 1.3x of the
  bandwidth floor, the Qwen2.5-1.5B step and block at most 2.5 ms, each on the slot pool's fastest
  path; a whole verify round within 1.15x of its two blocks; 64 sessions at least 16x one
  session's verified tokens/s (1.5B and 7B; the 32B's reported).
- `--cloud-round` (bench.cloud_round on the GPU): the same 1.15x for the live verifier's round, its
  session code as the server runs it (each method's; `fusion` and `llm` feed one token a model).
- `--e2e` (bench.speed on the GPU): every row's measured tokens/s within 10 % of the cost model.
- `--projection` (bench.gpu_projection, the paper's pair): `specsteer` at least 2x `fusion` at RTT
  50 ms; where (RTT, draft step) it reaches 3x `fusion` and where it beats `llm`.
A criterion whose figures are in none of the files is listed as not measured. Exit 0 whatever
holds: a report, not a gate.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.gpu_projection import fastest_pool
from bench.results import write_results
from specsteer.core.cli import command_parser, reported
from specsteer.core.errors import ConfigError

__all__ = ["Verdict", "cloud_round_verdicts", "e2e_verdicts", "gpu_verdicts", "main", "projection_verdicts"]

FLOOR_LIMIT = 1.3  # the 32B's step and block, x the bandwidth floor
SMALL_STEP_LIMIT_MS = 2.5  # the 1.5B's step and block
ROUND_LIMIT = 1.15  # a whole round, x its two blocks alone
BATCH_MIN = 16.0  # 64 sessions' verified tokens/s, x one session's
MODEL_TOLERANCE = 0.10  # end to end, measured against the cost model
FUSION_MIN_AT_50 = 2.0


@dataclass(frozen=True)
class Verdict:
    criterion: str
    figure: str
    target: str
    holds: bool | None  # None: not measured in these files, or reported only


Figures = tuple[str, dict[str, Any], str]  # (pool path, its figures, device)


def _fastest(gpus: Sequence[dict[str, Any]], config: str, *keys: str) -> Figures | None:
    """`config`'s fastest slot-pool path in the last of `gpus` whose row holds figures `keys`
    (each a "name/size" path into the pool's figures), so that a criterion's numbers come from one run."""
    found = None
    for gpu in gpus:
        for row in gpu.get("rows", []):
            pool = fastest_pool(row) if row.get("config") == config else None
            if pool is not None and all(_holds_figure(pool[1], key) for key in keys):
                found = (pool[0], pool[1], gpu.get("meta", {}).get("device", "?"))
    return found


def _holds_figure(pool: dict[str, Any], key: str) -> bool:
    name, size = key.split("/")
    return pool.get(name, {}).get(size) is not None


def _step_and_block(
    gpus: Sequence[dict[str, Any]], config: str, key: str, criterion: str, limit: float, unit: str
) -> Verdict:
    """`config`'s 1-token step and 5-token block, figures `key` of its fastest pool path, both at most `limit`."""
    target = f"<= {limit}{unit}"
    found = _fastest(gpus, config, f"{key}/1", f"{key}/5")
    if found is None:
        return Verdict(criterion, "not measured", target, None)
    path, pool, device = found
    step, block = pool[key]["1"], pool[key]["5"]
    return Verdict(
        criterion, f"{step:.2f}{unit} / {block:.2f}{unit} ({path}, {device})", target, max(step, block) <= limit
    )


def gpu_verdicts(gpus: Sequence[dict[str, Any]]) -> list[Verdict]:
    out = [
        _step_and_block(
            gpus, "qwen3-32b", "block_vs_floor", "Qwen3-32B step and 5-token block / bandwidth floor", FLOOR_LIMIT, "x"
        ),
        _step_and_block(
            gpus, "qwen2.5-1.5b", "block_ms", "Qwen2.5-1.5B step and 5-token block", SMALL_STEP_LIMIT_MS, " ms"
        ),
    ]
    rounds: dict[str, tuple[dict[str, Any], str]] = {}  # by Generalist: the last run that timed its round
    for gpu in gpus:
        for row in gpu.get("rows", []):
            if row.get("round", {}).get("by_batch"):
                rounds[row["config"]] = (row["round"], gpu.get("meta", {}).get("device", "?"))
    criterion, target = "a whole verify round / its two blocks alone", f"<= {ROUND_LIMIT}x"
    if not rounds:
        out.append(Verdict(criterion, "not measured", target, None))
    for config, (got, device) in rounds.items():
        ratios = {b: r["round_vs_blocks"] for b, r in got["by_batch"].items()}
        figure = ", ".join(f"B={b}: {v:.2f}x" for b, v in ratios.items()) + f" ({device})"
        holds = max(ratios.values()) <= ROUND_LIMIT
        out.append(Verdict(f"{criterion}: {config} + {got['specialist']}", figure, target, holds))

    for config, judged in (("qwen2.5-1.5b", True), ("qwen2.5-7b", True), ("qwen3-32b", False)):
        criterion = f"{config}: 64 sessions' verified tokens/s / one session's"
        target = f">= {BATCH_MIN:.0f}x" if judged else "reported"
        batched = _fastest(gpus, config, "batch_throughput_vs_one/64")
        if batched is None:
            out.append(Verdict(criterion, "not measured", target, None))
        else:
            pool = batched[1]
            scale = pool["batch_throughput_vs_one"]["64"]
            figure = f"{scale:.1f}x ({batched[0]}, {batched[2]})"
            whole = pool.get("whole_slot_batch_ms", {}).get("64")
            if isinstance(whole, float):  # serving-sized slots (bench.gpu --slot-len)
                figure += (
                    f"; in {pool['slot_len']}-position slots, 64 sessions' replay {pool['batch_ms']['64']:.2f} ms over "
                    f"a {pool['batch_window']}-column window, {whole:.2f} ms over the whole slots"
                )
            out.append(Verdict(criterion, figure, target, scale >= BATCH_MIN if judged else None))
    return out


def cloud_round_verdicts(rounds: dict[str, Any] | None) -> list[Verdict]:
    """The live verifier's round / its blocks alone (bench.cloud_round), its worst method judged."""
    criterion, target = "the live verifier's round / its blocks alone", f"<= {ROUND_LIMIT}x"
    if rounds is None:
        return [Verdict(criterion, "not measured", target, None)]
    rows = rounds["rows"]
    figure = ", ".join(f"{r['method']} {r['round_vs_blocks']:.2f}x" for r in rows)
    pair = f"{rounds['generalist']} + {rounds['specialist']}"
    holds = max(r["round_vs_blocks"] for r in rows) <= ROUND_LIMIT
    return [Verdict(f"{criterion} ({pair}, {rounds['kv']})", f"{figure} ({rounds['device']})", target, holds)]


def e2e_verdicts(speed: dict[str, Any] | None) -> list[Verdict]:
    criterion = "end to end: measured tokens/s / the cost model's, every method and RTT"
    target = f"within {MODEL_TOLERANCE:.0%}"
    rows = [] if speed is None else [r for r in speed.get("rows", []) if r.get("measured_vs_model") is not None]
    if not rows:
        return [Verdict(criterion, "not measured", target, None)]
    off = [r for r in rows if abs(r["measured_vs_model"] - 1) > MODEL_TOLERANCE]
    worst = max(rows, key=lambda r: abs(r["measured_vs_model"] - 1))
    rtts = sorted({r["rtt_ms"] for r in rows})
    figure = (
        f"{len(rows) - len(off)} of {len(rows)} rows within (RTTs {', '.join(f'{t:g}' for t in rtts)} ms); "
        f"worst {worst['measured_vs_model']:.2f} ({worst['method']}, RTT {worst['rtt_ms']:g} ms"
    )
    unmodelled = worst.get("unmodelled_seconds_per_round")
    if unmodelled is not None:  # where a shortfall went (bench.speed's decomposition of a round)
        figure += (
            f"; a round: {worst['seconds'] / worst['rounds'] * 1e3:.1f} ms measured, "
            f"{unmodelled * 1e3:.1f} ms of it the model prices nowhere"
        )
        stream = worst.get("stream_seconds_per_round")
        if stream is not None:
            figure += f", {stream * 1e3:.1f} ms of which the stream's wait beyond the verifier and the path"
    figure += ")"
    return [Verdict(criterion, figure, target, not off)]


def projection_verdicts(projection: dict[str, Any] | None) -> list[Verdict]:
    if projection is None:
        return [Verdict("projection (paper pair): specsteer / fusion at RTT 50 ms", "not measured", ">= 2x", None)]
    pair = f"{projection['generalist']} + {projection['specialist']}"
    at50 = projection["by_rtt_ms"]["50"]
    ratio = at50["specsteer"] / at50["fusion"]
    out = [
        Verdict(
            f"projection ({pair}): specsteer / fusion at RTT 50 ms",
            f"{ratio:.2f}x (K={at50['best_k']}, draft step {projection['draft_step_ms']} ms)",
            f">= {FUSION_MIN_AT_50:.0f}x",
            ratio >= FUSION_MIN_AT_50,
        )
    ]
    grid = projection["grid"]
    three = [c for c in grid if c["specsteer"] >= 3 * c["fusion"]]
    beats = [c for c in grid if c["specsteer"] > c["llm_rounds"]]
    streamed = [c for c in grid if c["specsteer"] > c["llm_streamed"]]
    for name, cells in (
        ("reaches 3x fusion", three),
        ("beats llm (a round a token)", beats),
        ("beats llm streamed", streamed),
    ):
        out.append(Verdict(f"projection ({pair}): where specsteer {name}", _cells(cells, len(grid)), "reported", None))
    return out


def _cells(cells: Sequence[dict[str, Any]], total: int) -> str:
    """The (RTT, draft step) cells, as the draft steps at each RTT."""
    if not cells:
        return f"none of the {total} (RTT, draft step) cells"
    steps: dict[float, list[float]] = {}
    for c in cells:
        steps.setdefault(c["rtt_ms"], []).append(c["draft_step_ms"])
    by_rtt = "; ".join(
        f"RTT {r:g} ms: draft step {', '.join(f'{d:g}' for d in sorted(ds))} ms" for r, ds in sorted(steps.items())
    )
    return f"{len(cells)} of {total} cells: {by_rtt}"


def page(verdicts: Sequence[Verdict], command: str) -> str:
    mark = {True: "holds", False: "**does not hold**", None: "-"}
    lines = [
        "# Issue 27's Must show, read off GPU runs' JSON",
        "",
        f"`{command}`",
        "",
        "| criterion | figure | target | verdict |",
        "|---|---|---|---|",
    ]
    lines += [f"| {v.criterion} | {v.figure} | {v.target} | {mark[v.holds]} |" for v in verdicts]
    return "\n".join(lines) + "\n"


def _read(path: Path | None, what: str) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"Cannot read the {what} JSON {path}: {exc}.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a {what} JSON (not an object).")
    return data


def _judged(judge: Callable[[Any], list[Verdict]], data: Any, what: str) -> list[Verdict]:
    """`judge(data)`, with a file that parses but lacks what that JSON holds refused in a sentence."""
    try:
        return judge(data)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(
            f"A file given as a {what} JSON lacks what one holds ({type(exc).__name__}: {exc})."
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.gpu_verdict", __doc__.splitlines()[0])
    p.add_argument("--gpu", type=Path, action="append", default=[], help="a bench.gpu JSON (repeat; later wins)")
    p.add_argument("--cloud-round", type=Path, help="bench.cloud_round's JSON of the GPU run")
    p.add_argument("--e2e", type=Path, help="bench.speed's JSON of the end-to-end GPU run")
    p.add_argument("--projection", type=Path, help="bench.gpu_projection's JSON for the paper's pair")
    p.add_argument("--out", type=Path, help="also write OUT/gpu_verdict.md and .json")
    args = p.parse_args(argv)

    def command() -> int:
        gpus = [g for g in (_read(path, "bench.gpu") for path in args.gpu) if g is not None]
        verdicts = [
            *_judged(gpu_verdicts, gpus, "bench.gpu"),
            *_judged(cloud_round_verdicts, _read(args.cloud_round, "bench.cloud_round"), "bench.cloud_round"),
            *_judged(e2e_verdicts, _read(args.e2e, "bench.speed"), "bench.speed"),
            *_judged(projection_verdicts, _read(args.projection, "bench.gpu_projection"), "bench.gpu_projection"),
        ]
        shown = "python -m bench.gpu_verdict " + " ".join(sys.argv[1:] if argv is None else argv)
        text = page(verdicts, shown)
        if args.out is not None:
            body = {"command": shown, "verdicts": [asdict(v) for v in verdicts]}
            write_results(args.out, "gpu_verdict", body, text)
        print(text)
        return 0

    return reported("bench.gpu_verdict", command)


if __name__ == "__main__":
    sys.exit(main())
