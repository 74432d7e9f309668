"""The personal loop's scores and report: ROUGE and authorship per row, paired intervals, training.

`bench.personal_loop` generates and trains; this reads its runs log and training summaries. Every
generated text (and every real held-out body, the classifier's ceiling) is scored by the
authorship classifier fitted on the authors' history bodies (`bench.attribution`); paired
differences over the same queries use `bench.quality`'s bootstrap.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from typing import Any, NamedTuple

from bench.attribution import AuthorClassifier, ProfileDistance
from bench.plotting import figure, plotted
from bench.quality import BOOTSTRAP_RESAMPLES, RunsLog, device_path_line, mean_se, paired_difference, rows_device_paths
from bench.style_split import RULE, split_history, style_part

__all__ = [
    "CEILING",
    "CEILING_CUT",
    "VARIANTS",
    "adapter_label",
    "comparisons",
    "loss_table",
    "stopped_device_label",
    "sweep_label",
    "write_report",
]

HOLDOUT = 4  # the federation's default held-out entries per device (TaskConfig.holdout)
GAMMA = 0.5
ALPHA = 1.0  # SessionParams' default recovery weight
TOP_K = 10  # SessionParams' default count of steering candidates
SLM_RAG, LLM, SPECSTEER = "slm-rag", "llm", "specsteer"
VARIANTS = ("dp", "no-dp")
CEILING = "real body (ceiling)"
CEILING_CUT = "real body, cut to the generated length"
HISTORY_COPY = "copy of the device's history (newest entries)"
METRICS = ("rougeL", "attribution", "style_delta")
# What each row's summary averages (with its standard error).
SUMMARY_METRICS = (
    "rougeL",
    "rouge1",
    "attribution",
    "attribution_top1",
    "style_delta",
    "style_delta_nearest",
    "repetition",
)


FRONTIER_PNG = "personal_loop_frontier.png"


def adapter_label(method: str, variant: str) -> str:
    return f"{method}+adapters ({variant})"


Gate = tuple[float, float]  # the certainty gate: (certainty, gamma_uncertain); see SessionParams


def sweep_label(
    variant: str | None,
    gamma: float,
    alpha: float = ALPHA,
    gate: Gate | None = None,
    gamma_form: float | None = None,
    top_k: int = TOP_K,
    no_repeat: int = 0,
) -> str:
    """A `specsteer+adapters` row of the sweep (`--gammas`, `--alphas`, `--top-ks`, `--gates`,
    `--forms`, `--no-repeats`): the same adapters at another gamma, recovery weight alpha, candidate
    count k, certainty gate, form rule or device repetition stop (the label names each but gamma
    only when it is not the default); `variant` None: `specsteer` on the base weights at that setting."""
    extra = "" if alpha == ALPHA else f", alpha {alpha:g}"
    extra += "" if top_k == TOP_K else f", k {top_k}"
    extra += "" if gate is None else f", gate {gate[0]:g}/{gate[1]:g}"
    extra += "" if gamma_form is None else f", form {gamma_form:g}"
    extra += "" if not no_repeat else f", no-repeat {no_repeat}"
    return f"{_sweep_prefix(variant)}{gamma:g}{extra})"


def stopped_device_label(variant: str | None, no_repeat: int) -> str:
    """`slm-rag` (with `variant`'s adapters, or none) under the device's repetition stop of n-gram
    length `no_repeat` (`DecodeOptions.no_repeat_ngram`): the device alone as SpecSteer's device."""
    if variant is None:
        return f"{SLM_RAG} (no-repeat {no_repeat})"
    return f"{adapter_label(SLM_RAG, variant)[:-1]}, no-repeat {no_repeat})"


class SweptSetting(NamedTuple):
    """A sweep row's setting; certainty 0 without a gate, gamma_form None without the form rule."""

    gamma: float
    alpha: float
    top_k: int
    certainty: float
    gamma_uncertain: float
    gamma_form: float | None
    no_repeat: int = 0

    @property
    def gate(self) -> Gate | None:
        return (self.certainty, self.gamma_uncertain) if self.certainty else None

    def order(self) -> tuple[float, ...]:
        """A sort key: the fields in order, no form rule before any gamma_form (None does not sort)."""
        form = -1.0 if self.gamma_form is None else self.gamma_form
        return (self.gamma, self.alpha, self.top_k, self.certainty, self.gamma_uncertain, form, self.no_repeat)


def swept_setting(label: str, variant: str | None) -> SweptSetting | None:
    """The setting of `variant`'s sweep row `label` (`sweep_label`'s inverse); None for any other row."""
    prefix = _sweep_prefix(variant)
    if not (label.startswith(prefix) and label.endswith(")")):
        return None
    rest, _, no_repeat = label[len(prefix) : -1].partition(", no-repeat ")
    rest, _, form = rest.partition(", form ")
    rest, _, gate = rest.partition(", gate ")
    rest, _, top_k = rest.partition(", k ")
    gamma, _, alpha = rest.partition(", alpha ")
    certainty, _, gamma_uncertain = gate.partition("/")
    return SweptSetting(
        float(gamma),
        float(alpha) if alpha else ALPHA,
        int(top_k) if top_k else TOP_K,
        float(certainty) if gate else 0.0,
        float(gamma_uncertain) if gate else 0.0,
        float(form) if form else None,
        int(no_repeat) if no_repeat else 0,
    )


def _sweep_prefix(variant: str | None) -> str:
    base = SPECSTEER + " (" if variant is None else adapter_label(SPECSTEER, variant)[:-1] + ", "
    return f"{base}gamma "


def comparisons(variants: Sequence[str], swept: Sequence[tuple[str | None, str]] = ()) -> list[tuple[str, str]]:
    """(row, minus) pairs: the issue's three per variant, then what explains them; and each swept
    (variant, label) against `llm`, the device alone with the same adapters (or none), and the
    default setting on the same weights (what the swept setting changes); a row under the device's
    repetition stop also against the device alone under the same stop, and that one against the
    device alone without it."""
    out: list[tuple[str, str]] = []
    for v in variants:
        slm_a, spec_a = adapter_label(SLM_RAG, v), adapter_label(SPECSTEER, v)
        out += [(slm_a, SLM_RAG), (spec_a, LLM), (spec_a, slm_a), (spec_a, SPECSTEER)]
    for v, label in swept:
        device, default = (
            (SLM_RAG, SPECSTEER) if v is None else (adapter_label(SLM_RAG, v), adapter_label(SPECSTEER, v))
        )
        out += [(label, LLM), (label, device), (label, default)]
        setting = swept_setting(label, v)
        if setting is not None and setting.no_repeat:
            stopped = stopped_device_label(v, setting.no_repeat)
            out += [(label, stopped), (stopped, device)]  # the second: what the stop does to the device alone
    out += [(SPECSTEER, LLM), (SPECSTEER, SLM_RAG)]
    if all(v in variants for v in VARIANTS):
        out += [(adapter_label(m, "dp"), adapter_label(m, "no-dp")) for m in (SLM_RAG, SPECSTEER)]
    return list(dict.fromkeys(out))  # several swept rows may share a stop's pairs


def repeated_trigram_share(text: str) -> float:
    """The share of a text's word trigrams that repeat an earlier one (0: none; a text that says one
    thing over and over nears 1): how much of it is a model looping, which neither ROUGE-L nor the
    style measures single out. 0 for a text under three words."""
    words = text.split()
    trigrams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return 1 - len(set(trigrams)) / len(trigrams) if trigrams else 0.0


def score_rows(
    classifier: AuthorClassifier,
    rows: list[dict[str, Any]],
    queries: list[tuple[dict[str, Any], dict[str, Any]]],
    delta: ProfileDistance | None = None,
) -> list[dict[str, Any]]:
    """Every generated row with its attribution (and profile distance), plus the ceiling rows (the
    real held-out bodies) and what copying the device's history would score."""
    generated = [r for r in rows if r["text"].strip()]
    lengths = [len(r["text"]) for r in generated]
    cut = int(statistics.median(lengths)) if lengths else 0
    ceiling = [
        {"config": CEILING, "user": u["user_id"], "subject": q["subject"], "text": q["target"]} for u, q in queries
    ]
    ceiling_cut = [{**c, "config": CEILING_CUT, "text": c["text"][:cut]} for c in ceiling] if cut else []
    # The query's i-th newest entry of the device part: the gaming a measure must not reward.
    nth: dict[str, int] = {}
    copies = []
    for u, q in queries:
        i = nth[str(u["user_id"])] = nth.get(str(u["user_id"]), 0) + 1
        device = split_history(u)[0]
        if len(device) >= i:
            copies.append(
                {"config": HISTORY_COPY, "user": u["user_id"], "subject": q["subject"], "text": device[-i]["body"]}
            )
    scored = [dict(r) for r in rows] + ceiling + ceiling_cut + copies
    for r in scored:
        r["repetition"] = repeated_trigram_share(r["text"])
    got = classifier.attribute([r["text"] for r in scored], [r["user"] for r in scored])
    for r, a in zip(scored, got, strict=True):
        r["attribution"] = a.probability
        r["attribution_top1"] = 1.0 if a.top1 else 0.0
    if delta is not None:
        for r, d in zip(scored, delta.score([r["text"] for r in scored], [r["user"] for r in scored]), strict=True):
            r["style_delta"] = d.score
            r["style_delta_nearest"] = 1.0 if d.nearest else 0.0
    return scored


def summarize(scored: list[dict[str, Any]], labels: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for label in labels:
        mine = [r for r in scored if r["config"] == label]
        if not mine:
            continue
        entry: dict[str, Any] = {"config": label, "n": len(mine), "users": len({r["user"] for r in mine})}
        for metric in SUMMARY_METRICS:
            values = [r[metric] for r in mine if metric in r]
            if values:
                entry[metric], entry[f"{metric}_se"] = mean_se(values)
        if "seconds" in mine[0]:
            entry["seconds_per_query"] = statistics.fmean(r["seconds"] for r in mine)
        out.append(entry)
    return out


def paired(scored: list[dict[str, Any]], pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    diffs = (paired_difference(scored, row, minus, metric) for row, minus in pairs for metric in METRICS)
    return [d for d in diffs if d is not None]


def loss_table(training: dict[str, Any]) -> dict[str, Any]:
    """Mean held-out loss over the devices: v0 (base), and the last evaluation with global / +personal."""
    first, last_g, last_p = [], [], []
    for d in training["devices"]:
        losses = [x for x in d["losses"] if x["global"] is not None]
        if not losses:
            continue
        first.append(losses[0]["global"])
        if len(losses) > 1:
            last_g.append(losses[-1]["global"])
            if losses[-1]["personal"] is not None:
                last_p.append(losses[-1]["personal"])
    eps = [d["epsilon"] for d in training["devices"] if d["epsilon"] is not None]

    def mean(values: list[float]) -> float | None:
        return statistics.fmean(values) if values else None

    return {
        "loss_v0": mean(first),
        "loss_global": mean(last_g),
        "loss_global_personal": mean(last_p),
        "epsilon_mean": mean(eps),
        "epsilon_max": max(eps) if eps else None,
    }


_MEASURES: dict[tuple[str, ...], tuple[AuthorClassifier, ProfileDistance]] = {}


def style_measures(users: Sequence[dict[str, Any]]) -> tuple[AuthorClassifier, ProfileDistance]:
    """The attribution classifier and the profile distance, fitted on these authors' style part
    only (`bench.style_split`: never retrieved, never trained on); fitted once per process."""
    key = tuple(str(u["user_id"]) for u in users)
    if key not in _MEASURES:
        texts = style_part(users)
        _MEASURES[key] = (AuthorClassifier.fit(texts), ProfileDistance.fit(texts))
    return _MEASURES[key]


def write_report(
    args: argparse.Namespace,
    users: list[dict[str, Any]],
    queries: list[tuple[dict[str, Any], dict[str, Any]]],
    runs: RunsLog,
    trainings: dict[str, dict[str, Any]],
    command: str,
) -> dict[str, Any]:
    classifier, delta = style_measures(users)
    keys = {(u["user_id"], q["subject"]) for u, q in queries}
    rows = [
        r
        for k, r in runs.done.items()
        if (k[0], k[1]) in keys and k[3] == args.max_new_tokens and r.get("specialist") == args.specialist
    ]
    variants = [v for v in VARIANTS if any(r.get("variant") == v for r in rows) or v in trainings]
    labels = [SLM_RAG, LLM, SPECSTEER]
    for v in variants:
        labels += [adapter_label(SLM_RAG, v), adapter_label(SPECSTEER, v)]
    # The sweep's rows in the runs log (whichever command wrote them), by training (the base
    # weights' first), then gamma, alpha, k, gate and form rule.
    settings = {
        (v, r["config"]): g for r in rows for v in (None, *variants) if (g := swept_setting(r["config"], v)) is not None
    }
    swept = sorted(settings, key=lambda key: (key[0] or "", settings[key].order()))
    stopped = sorted({(v, settings[v, label].no_repeat) for v, label in swept if settings[v, label].no_repeat}, key=str)
    labels += [stopped_device_label(v, n) for v, n in stopped]
    labels += [label for _, label in swept]
    scored = score_rows(classifier, rows, queries, delta)
    result = {
        "meta": {
            "command": command,
            "data": str(args.data),
            "users": [u["user_id"] for u in users],
            "queries_planned": len(queries),
            # Per training: the queries with all five of its rows (the three base rows and its two).
            "queries_complete": {
                v: sum(
                    all(
                        (u["user_id"], q["subject"], label, args.max_new_tokens) in runs.done
                        for label in (SLM_RAG, LLM, SPECSTEER, adapter_label(SLM_RAG, v), adapter_label(SPECSTEER, v))
                    )
                    for u, q in queries
                )
                for v in variants
            },
            "max_new_tokens": args.max_new_tokens,
            "specialist": args.specialist,
            "generalist": args.generalist,
            "gamma": GAMMA,
            "alpha": ALPHA,
            "gammas_swept": sorted({settings[key].gamma for key in swept}),
            "alphas_swept": sorted({settings[key].alpha for key in swept}),
            "top_ks_swept": sorted({settings[key].top_k for key in swept}),
            "gates_swept": sorted({gate for key in swept if (gate := settings[key].gate) is not None}),
            "forms_swept": sorted({f for key in swept if (f := settings[key].gamma_form) is not None}),
            "no_repeats_swept": sorted({n for key in swept if (n := settings[key].no_repeat)}),
            "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
            "attribution": "char_wb 2-4-gram TF-IDF (sublinear tf) + logistic regression (C = 10), "
            "fitted on the authors' style part only",
            "style_delta": "Burrows's Delta over 89 function words and 31 punctuation marks, z-scored over the "
            "style part; the score is the share of the other authors farther from the text than its author "
            "(1 = nearest, about 0.5 by chance)",
            "repetition": "the share of a text's word trigrams that repeat an earlier one (repeated_trigram_share)",
            "style_split": RULE,
            "style_part_entries": {str(u["user_id"]): len(split_history(u)[1]) for u in users},
            "rows_device_paths": rows_device_paths(rows),
            "reused_rows": sorted({r["config"] for r in rows if r.get("reused_from")}),
            "chance": 1 / len(users) if users else math.nan,
        },
        "summary": summarize(scored, [*labels, CEILING, CEILING_CUT, HISTORY_COPY]),
        "paired": paired(scored, comparisons(variants, swept)),
        "training": {v: {**t, "losses": loss_table(t)} for v, t in trainings.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "personal_loop.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "personal_loop.md").write_text(markdown(result), encoding="utf-8")
    plotted(lambda: plot_frontier(result, args.out / FRONTIER_PNG), FRONTIER_PNG)
    return result


def plot_frontier(result: dict[str, Any], path: Any) -> None:
    """ROUGE-L against each style measure, one point per generated row (± one standard error)."""
    rows = [s for s in result["summary"] if "rougeL" in s]
    with figure(path, (11, 4.5), ncols=2) as axes:
        for ax, (metric, name) in zip(
            axes,
            (("attribution", "attribution p(true author)"), ("style_delta", "profile distance score")),
            strict=True,
        ):
            for s in rows:
                if metric not in s:
                    continue
                ax.errorbar(s["rougeL"], s[metric], xerr=s["rougeL_se"], yerr=s[f"{metric}_se"], fmt="o", capsize=2)
                ax.annotate(
                    s["config"], (s["rougeL"], s[metric]), fontsize=6, xytext=(3, 3), textcoords="offset points"
                )
            ceiling = next((s for s in result["summary"] if s["config"] == CEILING and metric in s), None)
            if ceiling is not None:
                ax.axhline(ceiling[metric], linestyle="--", linewidth=0.8, color="grey")
                ax.annotate("ceiling (real bodies)", (ax.get_xlim()[0], ceiling[metric]), fontsize=6)
            ax.set_xlabel("ROUGE-L")
            ax.set_ylabel(name)


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "—" if value is None else format(value, fmt)


def markdown(result: dict[str, Any]) -> str:
    m = result["meta"]
    complete = ", ".join(f"{n} with the {v} adapters" for v, n in m["queries_complete"].items()) or "none"
    lines = [
        "# The personal loop: federated adapters, SpecSteer, ROUGE and authorship",
        "",
        f"Command: `{m['command']}`",
        "",
        f"{len(m['users'])} authors ({', '.join(m['users'])}); {m['queries_planned']} held-out queries planned, "
        f"complete (every row): {complete}; {m['specialist']} -> {m['generalist']}, greedy, {m['max_new_tokens']} new "
        f"tokens, SpecSteer gamma {m['gamma']}.",
        "",
        f"Style split: {m.get('style_split', 'none (the whole history)')}. Style part per author: "
        + ", ".join(f"{u} {n}" for u, n in m.get("style_part_entries", {}).items())
        + ".",
        "",
        f"Style measures: attribution, {m['attribution']} (chance {m['chance']:.3f}); profile distance, "
        f"{m.get('style_delta', '—')}." + (f" Repeated trigrams: {m['repetition']}." if "repetition" in m else ""),
        "",
        device_path_line(m.get("rows_device_paths", {}))
        + (
            f" Rows reused from an earlier run (the cloud alone: no device path): {', '.join(m['reused_rows'])}."
            if m.get("reused_rows")
            else ""
        ),
        "",
        "| row | n | authors | ROUGE-L | attribution p(true author) | true author first | profile distance score "
        "| true author nearest | repeated trigrams |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result["summary"]:
        rl = f"{s['rougeL']:.3f} ± {s['rougeL_se']:.3f}" if "rougeL" in s else "—"
        dl = f"{s['style_delta']:.3f} ± {s['style_delta_se']:.3f}" if "style_delta" in s else "—"
        near = f"{s['style_delta_nearest']:.2f}" if "style_delta_nearest" in s else "—"
        rep = f"{s['repetition']:.3f}" if "repetition" in s else "—"
        lines.append(
            f"| {s['config']} | {s['n']} | {s['users']} | {rl} | {s['attribution']:.3f} ± {s['attribution_se']:.3f} "
            f"| {s['attribution_top1']:.2f} | {dl} | {near} | {rep} |"
        )
    lines += [
        "",
        f"Paired differences over the same queries (mean, 95 % bootstrap interval of {m['bootstrap_resamples']:,} "
        "resamples of queries, wins/losses):",
        "",
        "| row | minus | metric | n | mean diff | 95 % interval | wins / losses |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in result["paired"]:
        lines.append(
            f"| {d['row']} | {d['minus']} | {d['metric']} | {d['n']} | {d['mean']:+.3f} | "
            f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] | {d['wins']} / {d['losses']} |"
        )
    if result["training"]:
        lines += [
            "",
            "Training (the federation's own held-out evaluation, mean over devices; ε per commit from each ledger):",
            "",
            "| training | rounds | DP steps / round | personal steps / round | history | max len | loss v0 (base) "
            "| loss + global | loss + global + personal | ε mean (max) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for v, t in result["training"].items():
            s, loss = t["spec"], t["losses"]
            eps = "no DP" if not s["dp"] else f"{_num(loss['epsilon_mean'])} ({_num(loss['epsilon_max'])})"
            lines.append(
                f"| {v} | {len(t['rounds'])}/{s['rounds']} | {s['dp_steps']} | {s['personal_steps']} | "
                f"{s['history']} ({HOLDOUT} held out) | {s['max_len']} | {_num(loss['loss_v0'])} | "
                f"{_num(loss['loss_global'])} | {_num(loss['loss_global_personal'])} | {eps} |"
            )
        lines += [
            "",
            "Per device (held-out loss: v0, then after each round with the global adapter / + personal; "
            "DP steps it trained per round, which its budget may cut below the proposal):",
            "",
            "| training | device | held-out loss | DP steps | rounds sat out | ε |",
            "|---|---|---|---|---|---|",
        ]
        for v, t in result["training"].items():
            for d in t["devices"]:
                losses = " → ".join(
                    _num(x["global"]) if i == 0 else f"{_num(x['global'])} / {_num(x['personal'])}"
                    for i, x in enumerate(d["losses"])
                )
                steps = ", ".join(str(x) for x in d["dp_steps"]) or "—"
                lines.append(
                    f"| {v} | {d['user']} | {losses or '—'} | {steps} | {len(d.get('skipped', []))} | "
                    f"{'no DP' if d['epsilon'] is None else _num(d['epsilon'])} |"
                )
    lines += ["", f"![ROUGE-L against each style measure, one point per row]({FRONTIER_PNG})"]
    return "\n".join(lines) + "\n"
