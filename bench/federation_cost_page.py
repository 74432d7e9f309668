"""The federation-cost page: ratios of DP-SGD (and SecAgg+) against the SGD baseline, the markdown
table and the plot, from the result `bench.federation_cost` measured."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.plotting import figure

MIB = 1024 * 1024

# (key, label, how rounds combine): times are summed over rounds, memory peaks take the highest round;
# "per sequence" divides the global-adapter seconds by the sequences it trained (Poisson batches vary).
RATIOS = (
    ("wall_seconds", "round wall time", "sum"),
    ("cpu_seconds", "round CPU time", "sum"),
    ("global_seconds_mean", "global-adapter training", "sum"),
    ("global_seconds", "global-adapter training per sequence", "per-sequence"),
    ("global_cpu_seconds", "global-adapter CPU per sequence", "per-sequence"),
    ("peak_rss_mb", "peak RSS", "max"),
    ("peak_above_loaded_mb", "peak RSS above the loaded model", "max"),
)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else None


def _combine(rounds: list[dict[str, Any]], key: str, how: str) -> float:
    if how == "per-sequence":
        return _per_sequence(rounds, key)
    values = [float(r[key]) for r in rounds]
    return sum(values) if how == "sum" else max(values)


def ratios(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each configuration against the baseline (the first): over all rounds and round by round."""
    base = results[0]
    out: dict[str, dict[str, Any]] = {}
    for case in results[1:]:
        overall = {
            key: _ratio(_combine(case["rounds"], key, how), _combine(base["rounds"], key, how))
            for key, _, how in RATIOS
        }
        per_round = [
            {"round": r["round"], **{k: _ratio(_combine([r], k, how), _combine([b], k, how)) for k, _, how in RATIOS}}
            for r, b in zip(case["rounds"], base["rounds"], strict=False)
        ]
        out[case["id"]] = {"label": case["label"], "overall": overall, "rounds": per_round}
    return out


def _per_sequence(rounds: list[dict[str, Any]], key: str) -> float:
    """Global-adapter training seconds (`key`: wall or CPU) per sequence trained, all devices and rounds."""
    seconds = sum(c[key] for r in rounds for c in r["clients"])
    sequences = sum(c["global_sequences"] for r in rounds for c in r["clients"])
    return seconds / sequences if sequences else math.nan


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}×"


def markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    base = r["cases"][0]
    lines = [
        "# Federation cost per round: DP-SGD vs plain SGD (in-process simulation)",
        "",
        f"Command: `{r['command']}`",
        "",
        f"Model {s['model']}; {s['clients']} devices (users {', '.join(s['users'])}, newest {s['history_entries']} "
        f"history entries each, 4 held out); {s['rounds']} round(s); per device and round {s['dp_steps']} "
        f"global-adapter steps (batch 4; Poisson-sampled, 4 expected, under DP) and {s['personal_steps']} personal "
        f"step(s), sequences of {s['max_len']} tokens, LoRA rank 8 on all linear layers; {s['threads']} torch "
        f"thread(s); {r['machine']}; {r['seconds'] / 60:.1f} min in all. Baseline: {base['label']}. Every "
        "configuration ran in its own fresh process; memory is that process's RSS (the server and all devices: "
        "they run one after another and share one model). MiB = 2^20 bytes.",
        "",
        "## Ratios against the baseline",
        "",
        "| configuration | rounds | " + " | ".join(label for _, label, _ in RATIOS) + " |",
        "| --- | --- |" + " --- |" * len(RATIOS),
    ]
    for ratios in r["ratios"].values():
        lines.append(
            f"| {ratios['label']} | all | " + " | ".join(_x(ratios["overall"][k]) for k, _, _ in RATIOS) + " |"
        )
        for per in ratios["rounds"]:
            lines.append(
                f"| {ratios['label']} | {per['round']} | " + " | ".join(_x(per[k]) for k, _, _ in RATIOS) + " |"
            )
    lines += [
        "",
        "Times over all rounds are ratios of sums (global-adapter training: of the per-device means; per sequence: "
        "the global-adapter seconds of all devices over the sequences they trained). Memory: ratio of the highest "
        'per-round peak; "above the loaded model" subtracts the process\'s RSS after setup (model loaded, before '
        "round 1).",
        "",
        "## Per round",
        "",
        "| configuration | round | wall s | CPU s | device train s (mean) | of which global adapter s | "
        "global sequences (largest batch) | of which personal s | RSS at start MiB | peak RSS MiB | "
        "peak above loaded model MiB | sent / device MiB | received / device MiB | ε after |",
        "| --- |" + " --- |" * 13,
    ]
    for case in r["cases"]:
        for rnd in case["rounds"]:
            eps = "—" if rnd["epsilon_mean"] is None else f"{rnd['epsilon_mean']:.3f}"
            cells = [
                case["label"],
                rnd["round"],
                f"{rnd['wall_seconds']:.1f}",
                f"{rnd['cpu_seconds']:.1f}",
                f"{rnd['client_train_seconds_mean']:.1f}",
                f"{rnd['global_seconds_mean']:.1f}",
                f"{rnd['global_sequences']} ({rnd['global_max_batch']})",
                f"{rnd['personal_seconds_mean']:.1f}",
                f"{rnd['rss_before_mb']:.0f}",
                f"{rnd['peak_rss_mb']:.0f}",
                f"{rnd['peak_above_loaded_mb']:.0f}",
                f"{rnd['uplink_bytes_mean'] / MIB:.2f}",
                f"{rnd['downlink_bytes_mean'] / MIB:.2f}",
                eps,
            ]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        "## Per device",
        "",
        "| configuration | round | device | examples | train message s | global adapter s | global adapter CPU s | "
        "global sequences (largest batch) | peak RSS while training MiB | sent MiB | received MiB | ε after |",
        "| --- |" + " --- |" * 11,
    ]
    for case in r["cases"]:
        for rnd in case["rounds"]:
            for c in rnd["clients"]:
                cells = [
                    case["label"],
                    rnd["round"],
                    c["user"],
                    c["examples"],
                    f"{c['train_seconds']:.1f}",
                    f"{c['global_seconds']:.1f}",
                    f"{c['global_cpu_seconds']:.1f}",
                    f"{c['global_sequences']} ({c['global_max_batch']})",
                    "n/a" if c["train_peak_rss_mb"] is None else f"{c['train_peak_rss_mb']:.0f}",
                    f"{c['uplink_bytes'] / MIB:.2f}",
                    f"{c['downlink_bytes'] / MIB:.2f}",
                    "—" if c["epsilon"] is None else f"{c['epsilon']:.3f}",
                ]
                lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    lines += [
        "",
        "Setup (not in any round: the server creates v0, the devices' shared model loads): "
        + "; ".join(
            f"{c['label']} {c['setup']['seconds']:.1f} s, RSS after {c['setup']['rss_after_mb']:.0f} MiB"
            for c in r["cases"]
        )
        + ". Load average (1 min) before / after each configuration: "
        + "; ".join(f"{c['label']} {c['loadavg_before'][0]:.1f} / {c['loadavg_after'][0]:.1f}" for c in r["cases"])
        + ".",
    ]
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], path: Path) -> None:
    metrics = [(key, label) for key, label, _ in RATIOS]
    cases = list(r["ratios"].values())
    width = 0.8 / max(1, len(cases))
    with figure(path, (8, 4)) as ax:
        for i, ratios in enumerate(cases):
            xs = [m + (i - (len(cases) - 1) / 2) * width for m in range(len(metrics))]
            ys = [ratios["overall"][k] or 0.0 for k, _ in metrics]
            bars = ax.bar(xs, ys, width=width, label=ratios["label"])
            ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=8)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(metrics)), [_wrap(label) for _, label in metrics], fontsize=8)
        ax.set_ylabel(f"ratio to {r['cases'][0]['label']}")
        s = r["settings"]
        ax.set_title(f"Federation round cost vs plain SGD: {s['clients']} devices, {s['rounds']} round(s)")
        ax.legend(fontsize=8)


def _wrap(label: str, width: int = 14) -> str:
    lines: list[str] = []
    for word in label.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)
