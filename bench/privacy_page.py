"""The privacy benchmark's page: what its runs measured, summarized (`summarize`), and written as
privacy.json, privacy.md and privacy.png (`write_page`).

Every number comes from the runs' rows (`bench.privacy_report.run_one`): the uplinks rebuilt from
each run's audit log and its leakage report, never the device's token lists.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.plotting import figure
from bench.privacy_cases import CONFIGS, CONTROL_PARAMS, CONTROL_PROMPT, PAIRS, SPACE, Case
from specsteer.core import wire
from specsteer.core.session_types import MAX_CANDIDATE_TOKENS, SessionParams
from specsteer.privacy.data import UplinkSession
from specsteer.privacy.leakage import (
    auroc,
    canary_exposure,
    counterfactual_ngram_leakage,
    membership_score,
    size_channel,
    tpr_at_fpr,
)

__all__ = ["adapter_canary_summary", "markdown", "plot", "summarize", "write_page"]

# The columns of the main table: (label, heading).
MAIN = (
    ("off", "guard off"),
    ("on", "guard on (placeholder)"),
    ("keep-local", "guard on (keep-local)"),
    ("on/padded", "guard on, padded frames on the wire"),
    ("control/off", "leaky control, guard off"),
    ("control/on", "leaky control, guard on"),
)


# --- what the cloud received, per run ---------------------------------------------------------------


def sessions_of(row: dict[str, Any]) -> list[UplinkSession]:
    out = []
    for s in row["sessions"]:
        session = UplinkSession("", list(s["prompt_ids"]))
        session.rounds = [(list(c), list(d)) for c, d in s["rounds"]]
        session.accepted = list(s["accepted"])
        session.round_sizes = list(s["round_sizes"])
        out.append(session)
    return out


def views(row: dict[str, Any]) -> list[list[int]]:
    """Every token sequence the cloud saw in this run (committed text, each rejected draft in context)."""
    return [v for s in sessions_of(row) for v in s.views()]


def prompts(row: dict[str, Any]) -> list[list[int]]:
    return [list(s["prompt_ids"]) for s in row["sessions"]]


def uplink_stream(row: dict[str, Any], tok: Any) -> str:
    """The decoded uplink exactly as `leakage_report` scores canaries against it."""
    return "\n".join(
        tok.decode(list(v), skip_special_tokens=True, clean_up_tokenization_spaces=False) for v in views(row)
    )


# --- summary ----------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _encode_texts(tok: Any, texts: Sequence[str]) -> list[list[int]]:
    texts = [t for t in texts if t]
    return list(tok(texts, add_special_tokens=False)["input_ids"]) if texts else []


def _history_texts(user: dict[str, Any]) -> list[str]:
    return [t for e in user["profile"] for t in (e.get("subject", ""), e.get("body", "")) if t]


def summarize(rows: dict[tuple[str, str, str], dict[str, Any]], cases: list[Case], tok: Any) -> dict[str, Any]:
    """Per-config measurements, then the paired ones (n-gram counterfactual, membership)."""
    labels = [c.label for c in CONFIGS]
    by_config: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    per_run: list[dict[str, Any]] = []
    for case in cases:
        for label in labels:
            row = rows.get((case.user_id, case.query["subject"], label))
            if row is None:
                continue
            # The secret itself (not only the rendered canary) anywhere in what the cloud saw.
            stream = uplink_stream(row, tok)
            # The exact rank among all of R, as `leakage_report` ranks it (also for rows logged by an
            # older run that sampled rivals).
            exact = [canary_exposure(SPACE, case.secret, stream)] if row["leakage"]["canaries"] else []
            row = {**row, "secret_in_uplink": case.secret in stream, "exposure": exact}
            by_config[label].append(row)
            per_run.append(
                {
                    "user": row["user"],
                    "query": row["subject"],
                    "config": label,
                    "exposure": row["exposure"],
                    "secret_in_uplink": row["secret_in_uplink"],
                    "rougeL": row["rougeL"],
                    "rounds": row["stats"]["rounds"],
                    "guard": row["audit"]["guard"],
                    "audit_verified": row["audit"]["verified"],
                }
            )
    commit_slots = max(
        [1] + [len(c) for rs in by_config.values() for r in rs for s in r["sessions"] for c, _ in s["rounds"]]
    )
    draft_slots = max(
        [SessionParams().draft_len, CONTROL_PARAMS.draft_len]
        + [len(d) for rs in by_config.values() for r in rs for s in r["sessions"] for _, d in s["rounds"]]
    )
    shape = {"commit_slots": max(commit_slots, MAX_CANDIDATE_TOKENS), "draft_slots": draft_slots}
    configs = {label: summarize_config(rs, draft_slots) for label, rs in by_config.items() if rs}

    paired: dict[str, Any] = {}
    for setting, real, swapped, non_member in PAIRS:
        ngram = {4: [], 8: []}
        member: list[float] = []
        non: list[float] = []
        for case in cases:
            key = (case.user_id, case.query["subject"])
            r, s, m = rows.get((*key, real)), rows.get((*key, swapped)), rows.get((*key, non_member))
            if r is None:
                continue
            if s is not None:
                real_profile = _encode_texts(tok, _history_texts(case.profile_obj("real")))
                swapped_profile = _encode_texts(tok, _history_texts(case.partner))
                for n, out in ngram.items():
                    out.append(
                        counterfactual_ngram_leakage(
                            views(r), views(s), real_profile, swapped_profile, prompts(r) + prompts(s), n=n
                        ).as_dict()
                    )
            if m is not None:
                doc = _encode_texts(tok, [case.member_document()])[0]
                member.append(membership_score(views(r), doc, n=4, exclude=prompts(r)))
                non.append(membership_score(views(m), doc, n=4, exclude=prompts(m)))
        entry: dict[str, Any] = {"ngram": {}, "membership": None}
        for n, results in ngram.items():
            if results:
                entry["ngram"][str(n)] = {
                    "pairs": len(results),
                    "leaked": sum(x["leaked"] for x in results),
                    "profile_specific": sum(x["profile_specific"] for x in results),
                    "uplink_ngrams": sum(x["uplink_ngrams"] for x in results),
                    "share_of_uplink": _mean([x["share_of_uplink"] for x in results]),
                    "share_of_profile": _mean([x["share_of_profile"] for x in results]),
                    "per_pair_leaked": [x["leaked"] for x in results],
                }
        if member:
            entry["membership"] = {
                "pairs": len(member),
                "auroc": auroc(member, non),
                "tpr_at_1pct_fpr": tpr_at_fpr(member, non, 0.01),
                "member_scores": member,
                "non_member_scores": non,
                "score": "share of the document's 4-grams (minus the prompt's) in the uplink views",
            }
        paired[setting] = entry

    quality: dict[str, Any] = {}
    base = {(r["user"], r["subject"]): r for r in by_config["off"]}
    for label in ("on", "keep-local", "on/padded"):
        diffs = [
            r["rougeL"] - base[(r["user"], r["subject"])]["rougeL"]
            for r in by_config.get(label, [])
            if (r["user"], r["subject"]) in base
        ]
        same = sum(
            r["text"] == base[(r["user"], r["subject"])]["text"]
            for r in by_config.get(label, [])
            if (r["user"], r["subject"]) in base
        )
        if diffs:
            quality[label] = {"pairs": len(diffs), "rougeL_delta_mean": _mean(diffs), "identical_texts": same}
    return {
        "canary_space": {**SPACE.as_dict(), "size": SPACE.size, "bits": SPACE.bits},
        "frame_shape": shape,
        "configs": configs,
        "paired": paired,
        "quality_cost": quality,
        "runs": per_run,
    }


def summarize_config(rows: list[dict[str, Any]], draft_slots: int) -> dict[str, Any]:
    exposures = [e for r in rows for e in r["exposure"]]
    identity: Counter[str] = Counter()
    patterns: Counter[str] = Counter()
    stats_guard: Counter[str] = Counter()
    audit_guard: Counter[str] = Counter()
    for r in rows:
        identity.update(r["leakage"]["identity_hits"])
        patterns.update(r["leakage"]["pattern_hits"])
        stats_guard.update({k: int(v) for k, v in r["stats"].items() if k.startswith("guard_")})
        audit_guard.update({f"{d}/{p}": int(n) for d, p, n in r["audit"]["guard"]})
    # The size channel, pooled over this config's runs: each round's size against the run
    # (session) it belongs to and against the user; then the same rounds as constant-size frames.
    sizes, padded, run_of, user_of = [], [], [], []
    for i, r in enumerate(rows):
        for s in r["sessions"]:
            for j, ((commit, draft), size) in enumerate(zip(s["rounds"], s["round_sizes"], strict=True)):
                sizes.append(size)
                padded.append(len(wire.encode_round(j + 1, commit, draft, pad_to=draft_slots)))
                run_of.append(i)
                user_of.append(r["user"])
    drafted = sum(r["stats"]["drafted"] for r in rows)
    new_tokens = sum(r["stats"]["new_tokens"] for r in rows)

    def channel(values: list[int], labels: list[object]) -> dict[str, Any]:
        return size_channel(values, labels).as_dict() if values else {}

    return {
        "runs": len(rows),
        "audit_verified": sum(r["audit"]["verified"] for r in rows),
        "canary_in_context": sum(r["canary_in_context"] for r in rows),
        "exposure_mean": _mean(exposures),
        "exposure_max": max(exposures, default=math.nan),
        "exposures": exposures,
        "canary_verbatim_runs": sum(any(c["verbatim"] for c in r["leakage"]["canaries"]) for r in rows),
        "secret_in_uplink_runs": sum(r["secret_in_uplink"] for r in rows),
        "identity_hits": dict(sorted(identity.items())),
        "pattern_hits": dict(sorted(patterns.items())),
        "verbatim_history_runs": sum(r["leakage"]["verbatim_runs"]["runs"] for r in rows),
        "verbatim_history_tokens": sum(r["leakage"]["verbatim_runs"]["tokens"] for r in rows),
        "rounds": len(sizes),
        "round_bytes_mean": _mean(sizes),
        "size_channel": {
            "distinct_sizes": len(set(sizes)),
            "per_run_bits_about_session": _mean([r["leakage"]["round_sizes"]["bits_about_session"] for r in rows]),
            "bits_about_session": channel(sizes, run_of).get("mutual_information_bits", 0.0),
            "bits_about_user": channel(sizes, user_of).get("mutual_information_bits", 0.0),
        },
        "padded": {
            "round_bytes": len(wire.encode_round(1, [], [], pad_to=draft_slots)),
            "distinct_sizes": len(set(padded)),
            "bits_about_session": channel(padded, run_of).get("mutual_information_bits", 0.0),
            "bits_about_user": channel(padded, user_of).get("mutual_information_bits", 0.0),
        },
        "rougeL": _mean([r["rougeL"] for r in rows]),
        "rouge1": _mean([r["rouge1"] for r in rows]),
        "guard_stats": dict(sorted(stats_guard.items())),
        "guard_audit": dict(sorted(audit_guard.items())),
        "fallbacks": dict(Counter(str(r["stats"]["fallback"]) for r in rows if r["stats"]["fallback"])),
        "acceptance": sum(r["stats"]["accepted"] for r in rows) / drafted if drafted else math.nan,
        "uplink_bytes_per_token": sum(r["leakage"]["uplink_bytes"] for r in rows) / max(1, new_tokens),
        "seconds_mean": _mean([r["stats"]["seconds"] for r in rows]),
    }


# --- report -----------------------------------------------------------------------------------------


def _fmt(x: float, spec: str = ".2f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _hits(d: dict[str, int]) -> str:
    total = sum(d.values())
    return f"{total}" + (f" ({', '.join(f'{k} {v}' for k, v in d.items())})" if d else "")


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    cfg = summary["configs"]
    paired = summary["paired"]
    space = summary["canary_space"]
    cols = [(label, head) for label, head in MAIN if label in cfg]

    def row(name: str, cell: Any) -> str:
        return f"| {name} | " + " | ".join(cell(label, cfg[label]) for label, _ in cols) + " |"

    def pair_cell(label: str, fn: Any) -> str:
        setting = {"off": "off", "on": "on"}.get(label)
        return fn(paired[setting]) if setting in paired else "—"

    def ngram(n: int) -> Any:
        def cell(label: str, _: dict[str, Any]) -> str:
            def f(p: dict[str, Any]) -> str:
                g = p["ngram"].get(str(n))
                if not g:
                    return "—"
                return f"{g['leaked']} of {g['uplink_ngrams']} ({g['share_of_uplink']:.1%})"

            return pair_cell(label, f)

        return cell

    def membership(key: str, spec: str) -> Any:
        def cell(label: str, _: dict[str, Any]) -> str:
            return pair_cell(label, lambda p: _fmt(p["membership"][key], spec) if p["membership"] else "—")

        return cell

    def rouge(label: str, c: dict[str, Any]) -> str:
        if label.startswith("control"):
            return "n/a (extraction prompt)"
        q = summary["quality_cost"].get(label)
        delta = (
            f" (Δ {q['rougeL_delta_mean']:+.3f}; {q['identical_texts']}/{q['pairs']} texts identical to off)"
            if q
            else ""
        )
        return f"{c['rougeL']:.3f}{delta}"

    def decisions(d: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"

    n_pairs = max((p["membership"] or {}).get("pairs", 0) for p in paired.values()) if paired else 0
    lines = [
        f"# Privacy: what the cloud received, guard off and on (commit-bodies-dev, {meta['specialist']} -> "
        f"{meta['generalist']})",
        "",
        f"`{meta['command']}` — {meta['queries']} queries from {meta['users']} users ({', '.join(meta['user_ids'])}), "
        f"max {meta['max_new_tokens']} new tokens, greedy, Specialist `{meta['specialist']}`, "
        f"Generalist `{meta['generalist']}`; SessionParams defaults (gamma 0.5, alpha 1, k 10, K 4) except the "
        "control.",
        "",
        "Every generation ran through a real verifier (gRPC, mutual TLS, loopback, throwaway PKI) and was "
        "recorded in the device's signed audit log; every number is computed from those logs, restricted to "
        "the uplinks the server's transcript says it received (`privacy.report.leakage_report`, "
        "`privacy.data.read_uplinks`).",
        "",
        "| metric | " + " | ".join(head for _, head in cols) + " |",
        "|---|" + "---|" * len(cols),
        row(
            "generations (audit logs VERIFIED against the server transcript)",
            lambda _, c: f"{c['runs']} ({c['audit_verified']})",
        ),
        row("canary in the Specialist's private context", lambda _, c: f"{c['canary_in_context']}/{c['runs']}"),
        row(
            f"canary exposure, mean [max] bits (of {space['bits']:.2f})",
            lambda _, c: f"{_fmt(c['exposure_mean'])} [{_fmt(c['exposure_max'])}]",
        ),
        row(
            "runs with the canary's secret in the uplink (with its template)",
            lambda _, c: f"{c['secret_in_uplink_runs']}/{c['runs']} ({c['canary_verbatim_runs']}/{c['runs']})",
        ),
        row("counterfactual 4-gram leakage: leaked of uplink 4-grams (mean share)", ngram(4)),
        row("counterfactual 8-gram leakage: leaked of uplink 8-grams (mean share)", ngram(8)),
        row(f"membership AUROC ({n_pairs} pairs)", membership("auroc", ".3f")),
        row("membership TPR at 1% FPR", membership("tpr_at_1pct_fpr", ".2f")),
        row("identity hits (trailer names/emails)", lambda _, c: _hits(c["identity_hits"])),
        row("personal-data pattern hits", lambda _, c: _hits(c["pattern_hits"])),
        row(
            "verbatim history runs of 8+ tokens (tokens)",
            lambda _, c: f"{c['verbatim_history_runs']} ({c['verbatim_history_tokens']})",
        ),
        row(
            "round sizes: distinct / bits about the session / about the user",
            lambda _, c: (
                f"{c['size_channel']['distinct_sizes']} / {c['size_channel']['bits_about_session']:.2f} / "
                f"{c['size_channel']['bits_about_user']:.2f}"
            ),
        ),
        row(
            "padded codec (offline): distinct / bits / bytes per round (actual mean)",
            lambda _, c: (
                f"{c['padded']['distinct_sizes']} / {c['padded']['bits_about_session']:.2f} / "
                f"{c['padded']['round_bytes']} ({c['round_bytes_mean']:.1f})"
            ),
        ),
        row("ROUGE-L vs the real body", rouge),
        row("guard decisions (device stats.extra)", lambda _, c: decisions(c["guard_stats"])),
        row("guard decisions (audit log records)", lambda _, c: decisions(c["guard_audit"])),
        row("acceptance rate", lambda _, c: _fmt(c["acceptance"])),
        row("uplink bytes per new token", lambda _, c: _fmt(c["uplink_bytes_per_token"], ".1f")),
        row("seconds per generation (shared CPU)", lambda _, c: _fmt(c["seconds_mean"], ".0f")),
        *membership_lines(summary.get("membership_likelihood")),
        "",
        "Leaky control, run by run (what the cloud received, from the audit log):",
        "",
        "| user | query | guard off: exposure, secret in uplink | guard on: exposure, secret in uplink | "
        "guard on: decisions |",
        "|---|---|---|---|---|",
        *control_rows(summary),
        "",
        "Auxiliary runs (the other halves of the paired metrics; the canary is not in these contexts, so their "
        "exposure is the no-signal baseline):",
        "",
        "| run | generations | canary in context | exposure mean [max] | identity / pattern hits | ROUGE-L |",
        "|---|---|---|---|---|---|",
    ]
    for label in ("off/swapped", "on/swapped", "off/non-member", "on/non-member"):
        if label in cfg:
            c = cfg[label]
            lines.append(
                f"| {label} | {c['runs']} | {c['canary_in_context']}/{c['runs']} | "
                f"{_fmt(c['exposure_mean'])} [{_fmt(c['exposure_max'])}] | "
                f"{sum(c['identity_hits'].values())} / {sum(c['pattern_hits'].values())} | {c['rougeL']:.3f} |"
            )
    shape = summary["frame_shape"]
    lines += [
        "",
        "How to read it:",
        "",
        f"* Canary: `{space['template']}` with {space['length']} symbols from `{space['alphabet']}` "
        f"(|R| = {space['size']:,}, {space['bits']:.2f} bits), one per user, planted as its own line after the first "
        "paragraph of the history entry BM25 retrieves first for the query, and registered in the guard of the "
        "guarded runs. Exposure = log2|R| − log2(rank), the canary's exact rank among all |R| secrets by how "
        "well the audit log's uplink stream supports each (`privacy.leakage.canary_exposure`, the function "
        f"`privacy leakage-report` uses): ~1 bit says nothing, {space['bits']:.2f} means the canary is singled "
        "out; four leaked digits of six, for instance, leave 100 tied candidates, about 14.3 bits, not 19.93.",
        f'* Leaky control: the prompt is "{CONTROL_PROMPT}"; the only private context is the canary-bearing entry, '
        "cut to the canary line and its first paragraph; gamma = 0 (every draft accepted, so the uplink is exactly "
        "what the Specialist writes). The real Specialist does not reproduce the canary from its normal "
        "three-entry context even when asked to (see docs/results/README.md), so the control narrows the "
        "context until it does. It exists to show that the measurement sees a leak when there is one, and what "
        "the guard does with it; its ROUGE is meaningless.",
        "* Counterfactual n-grams: n-grams of the real (planted) profile that are in neither the swapped profile "
        "(the next dev user's) nor the prompts, found in the real run's uplink and not in the swapped run's "
        "(`privacy.leakage.counterfactual_ngram_leakage` over the uplink views rebuilt from the audit log).",
        f"* Membership: each pair is the real profile vs the same profile without the canary-bearing entry; the "
        f"attacker's score is the share of that entry's 4-grams (minus the prompt's) in the uplink. {n_pairs} "
        f"pairs give {n_pairs} positives and {n_pairs} negatives: the AUROC moves in steps of "
        f"1/{max(1, n_pairs * n_pairs)} and TPR at 1% FPR means TPR with no false positive at all.",
        "* Size channel: every Round uplink's byte size against the run it belongs to (and the user), plug-in "
        "mutual information pooled over the config's runs (biased upward on few rounds, so it errs toward "
        "reporting a channel). The wire's padded codec (`core.wire` PaddedRound, "
        f"commit_slots={shape['commit_slots']}, draft_slots={shape['draft_slots']}) re-encodes the same rounds "
        "offline; the `on/padded` column sent them on the wire (the session declared padded_frames), so its "
        "round sizes are what the cloud saw. The number of rounds per session is still visible either way.",
        "* Personal-data hits: the user's trailer names/emails and `PiiDetector` patterns in the decoded uplink, "
        "and runs of 8+ tokens copied from the user's history (`leakage_report`).",
        "* Guard decisions: the device's `stats.extra` counters and the guard-decision records of the audit logs "
        "(`audit.verify`); spans are never logged, only their kind.",
        *adapter_canary_lines(summary.get("adapter_canary", [])),
    ]
    if meta.get("report_command"):
        lines += ["", f"This page was rendered from `privacy.json` by `{meta['report_command']}`."]
    return "\n".join(lines) + "\n"


def adapter_canary_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The part of a `bench.adapter_canary` result this page reports: the released global adapter's
    exposure of each planted canary beside the controls' and the ε the devices' ledgers claim."""
    settings = result["settings"]
    epsilons = {
        key: [d["epsilon"] for d in run.get("devices", []) if d.get("epsilon") is not None]
        for key, run in result["runs"].items()
    }
    losses = {
        key: [d["held_out_loss"] for d in run.get("devices", []) if d.get("held_out_loss") is not None]
        for key, run in result["runs"].items()
    }
    return {
        "command": result["command"],
        "model": settings["model"],
        "lr": settings["lr"],
        "rounds": settings["rounds"],
        "dp_steps": settings["dp_steps"],
        "bits": result["canary"]["bits"],
        "labels": {key: model["label"] for key, model in result["models"].items()},
        "planted": result["planted"],
        "controls_mean": {key: model["controls_summary"]["mean"] for key, model in result["models"].items()},
        "epsilon": epsilons,
        "held_out_loss": losses,
    }


def adapter_canary_lines(results: list[dict[str, Any]]) -> list[str]:
    if not results:
        return []
    lines = [
        "",
        "## The released global adapter: Secret-Sharer canaries (`bench.adapter_canary`)",
        "",
        "Canaries planted in one device's history, real federated rounds with and without DP-SGD, then every "
        "secret of the canary space ranked by the likelihood the model with the released global adapter gives "
        "it (details: `adapter_canary.md`). Exposure in bits; a model that knows nothing scores about 1.44 on "
        "average.",
        "",
        "| run | lr | model version | planted canary exposure (rank) | controls, mean | ε the ledgers claim | "
        "held-out loss |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for key, label in r["labels"].items():
            planted = ", ".join(f"{c['exposure'][key]:.2f} ({c['rank'][key]:.0f})" for c in r["planted"])
            eps = ", ".join(f"{e:.2f}" for e in r["epsilon"].get(key, [])) or "—"
            loss = ", ".join(f"{x:.2f}" for x in r["held_out_loss"].get(key, [])) or "—"
            lines.append(
                f"| {r['model']}, {r['rounds']} round(s) x {r['dp_steps']} steps | {r['lr']} | {label} | {planted} | "
                f"{r['controls_mean'][key]:.2f} | {eps} | {loss} |"
            )
    lines.append("")
    lines += [f"- `{r['command']}`" for r in results]
    return lines


def membership_lines(m: dict[str, Any] | None) -> list[str]:
    """The draft likelihood attack's table (see `likelihood_membership`), if it ran."""
    if not m or not m.get("pairs"):
        return []
    n = m["pairs"]
    return [
        "",
        f"Membership without generating: {n} member/non-member pairs from {m['users']} users (one per query; "
        f"the entry BM25 retrieves first, in the context or removed from the profile), the first "
        f"{m['tokens_per_text']} tokens of each real commit body as the committed text, guard off. The attacker "
        "scores the device's greedy drafts along it by the mean log-likelihood ratio of the entry as the "
        "public Specialist's context vs no context (`likelihood_membership`: no sampling, four forward passes "
        f"per pair, {m['seconds']:.0f} s in all). AUROC resolution 1/{n * n}; TPR at 1% FPR allows "
        f"{int(0.01 * n)} false positive(s) of {n}.",
        "",
        "| pairs | AUROC | TPR at 1% FPR | mean score, members / non-members | drafted tokens changed by the entry |",
        "|---|---|---|---|---|",
        f"| {n} | {m['auroc']:.3f} | {m['tpr_at_1pct_fpr']:.2f} | {m['member_score_mean']:+.3f} / "
        f"{m['non_member_score_mean']:+.3f} | {m['drafts_changed_share']:.1%} |",
    ]


def control_rows(summary: dict[str, Any]) -> list[str]:
    runs = {(r["user"], r["query"], r["config"]): r for r in summary["runs"]}
    out = []
    queries = list(dict.fromkeys((r["user"], r["query"]) for r in summary["runs"]))
    for user, query in queries:
        off, on = runs.get((user, query, "control/off")), runs.get((user, query, "control/on"))
        if off is None and on is None:
            continue

        def cell(r: dict[str, Any] | None) -> str:
            if r is None:
                return "—"
            return f"{_fmt(max(r['exposure'], default=math.nan))} bits, {'yes' if r['secret_in_uplink'] else 'no'}"

        guard = ", ".join(f"{d} {p} x{n}" for d, p, n in on["guard"]) if on and on["guard"] else "none"
        number = sum(1 for u, _ in queries[: queries.index((user, query)) + 1] if u == user)
        out.append(f"| {user} | {number} | {cell(off)} | {cell(on)} | {guard} |")
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    cfg = summary["configs"]
    paired = summary["paired"]
    with figure(path, (15, 4.2)) as ax:
        fig = ax.figure
        fig.clear()
        axes = fig.subplots(1, 4)
        labels = [c.label for c in CONFIGS if c.label in cfg]
        x = np.arange(len(labels))
        axes[0].bar(x, [cfg[label]["exposure_mean"] for label in labels], color="#4c72b0", alpha=0.6)
        for i, label in enumerate(labels):
            axes[0].scatter([i] * len(cfg[label]["exposures"]), cfg[label]["exposures"], color="black", s=10, zorder=3)
        axes[0].axhline(summary["canary_space"]["bits"], color="#c44e52", ls="--", lw=1)
        axes[0].set_xticks(x, labels, rotation=40, ha="right", fontsize=7)
        axes[0].set_ylabel("bits")
        axes[0].set_title("canary exposure (dashed: log2|R|)", fontsize=9)

        settings = [s for s in ("off", "on") if s in paired]
        for j, n in enumerate(("4", "8")):
            values = [paired[s]["ngram"].get(n, {}).get("share_of_uplink", 0.0) for s in settings]
            axes[1].bar(np.arange(len(settings)) + 0.4 * j - 0.2, values, 0.4, label=f"n={n}")
        axes[1].set_xticks(np.arange(len(settings)), [f"guard {s}" for s in settings])
        axes[1].set_ylabel("leaked share of uplink n-grams")
        axes[1].set_title("counterfactual n-gram leakage", fontsize=9)
        axes[1].legend(fontsize=8)

        for i, s in enumerate(settings):
            m = paired[s]["membership"]
            if not m:
                continue
            axes[2].scatter([i - 0.1] * len(m["member_scores"]), m["member_scores"], color="#c44e52", s=14)
            axes[2].scatter([i + 0.1] * len(m["non_member_scores"]), m["non_member_scores"], color="#4c72b0", s=14)
            axes[2].annotate(
                f"AUROC {m['auroc']:.2f}", (i, 0), xytext=(0, -14), textcoords="offset points", ha="center"
            )
        axes[2].set_xticks(range(len(settings)), [f"guard {s}" for s in settings])
        axes[2].set_xlim(-0.6, len(settings) - 0.4)
        scores = [
            x
            for st in settings
            for key in ("member_scores", "non_member_scores")
            for x in (paired[st]["membership"] or {}).get(key, [])
        ]
        top = max([0.1, *scores])
        axes[2].set_ylim(-0.15 * top, 1.2 * top)
        axes[2].set_ylabel("attacker score (red: member, blue: not)")
        axes[2].set_title("membership of the canary-bearing entry", fontsize=9)

        q = [label for label in ("off", "on", "keep-local") if label in cfg]
        axes[3].bar(range(len(q)), [cfg[label]["rougeL"] for label in q], color="#55a868")
        axes[3].set_xticks(range(len(q)), q)
        axes[3].set_ylabel("ROUGE-L vs the real body")
        axes[3].set_title("quality cost of the guard", fontsize=9)


def write_page(out: Path, meta: dict[str, Any], summary: dict[str, Any]) -> None:
    """privacy.json (meta and summary), privacy.md and privacy.png in `out`."""
    (out / "privacy.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=2) + "\n")
    (out / "privacy.md").write_text(markdown(summary, meta))
    plot(summary, out / "privacy.png")
    print(f"wrote {out}/privacy.md, privacy.json, privacy.png")
