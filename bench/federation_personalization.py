"""Personalization effect of the on-device personal adapter, on real data.

    python -m bench.federation_personalization [--data ../shared/data/commit-bodies-dev.jsonl]
        [--users u00,u01,u02] [--queries 6] [--personal-steps 24] [--max-new-tokens 80] [--limit]

For each dev user the personal LoRA adapter is trained exactly as a device does in a round
(`federation.task.train_personal`: inference-format sequences built from the user's history,
the global adapter frozen on top of the base), then the user's held-out queries — all newer than
every history entry — are generated greedily with slm-rag (the Specialist with retrieved private
context, `sdk.decoding.generate`) twice: on base + global, and on base + global + personal, both
merged with `federation.adapters.apply_adapters` as inference does. The device drafts as it
ships (`--drafter`, default the SDK's: the merged weights converted to the int4 ONNX drafter, as
`sdk generate --federation-state` does); `--drafter torch` runs the merged torch model (the
reference path, and this benchmark's before issue 51). Scores are ROUGE-L and ROUGE-1 F1
(rouge-score, stemmed) against the real bodies.

The global adapter is v0 (the untrained initial one, i.e. the base model) unless ``--global-dir``
names a trained version, so the measured difference is the personal adapter's alone. Results go
to docs/results/federation_personalization.{md,json}; ``--limit`` makes a one-minute smoke run.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rouge_score import rouge_scorer

from specsteer.core.models import DEFAULT_SPECIALIST, load_causal_lm
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import Method, SessionParams
from specsteer.federation.adapters import apply_adapters, write_adapter
from specsteer.federation.task import (
    GLOBAL,
    PERSONAL,
    SpecialistWithAdapters,
    TaskConfig,
    build_examples,
    load_user,
    to_dataset,
    train_personal,
)
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DEFAULT_ONNX_PRECISION, DRAFTERS, ONNX_PRECISIONS, drafter_for

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"
DEFAULT_USERS = "u00,u01,u02"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.federation_personalization", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--users", default=DEFAULT_USERS, help="comma-separated user ids")
    p.add_argument("--queries", type=int, default=6, help="held-out queries per user (the dataset has 12)")
    p.add_argument("--personal-steps", type=int, default=24)
    p.add_argument("--personal-lr", type=float, default=2e-3)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--max-new-tokens", type=int, default=80)
    p.add_argument("--model", default=DEFAULT_SPECIALIST)
    p.add_argument("--global-dir", type=Path, default=None, help="a global adapter version folder (default: v0)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--drafter", choices=DRAFTERS, default=DEFAULT_DRAFTER, help="the device's forwards")
    p.add_argument("--drafter-precision", choices=ONNX_PRECISIONS, default=None, help="onnx drafter: its default")
    p.add_argument("--limit", action="store_true", help="smoke run: 1 user, 1 query, 2 steps, 16 tokens")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    args = p.parse_args(argv)
    if not args.data.is_file():
        print(f"bench.federation_personalization: error: no data file at {args.data}", file=sys.stderr)
        return 1
    users = [u.strip() for u in args.users.split(",") if u.strip()]
    if args.limit:
        users, args.queries, args.personal_steps, args.max_new_tokens = users[:1], 1, 2, 16
    torch.set_num_threads(args.threads)
    cfg = TaskConfig(
        model=args.model,
        max_len=args.max_len,
        personal_steps=args.personal_steps,
        personal_lr=args.personal_lr,
        holdout=0,
    )
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    params = SessionParams(method=Method.SLM_RAG)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-personal-"))

    base = load_causal_lm(args.model)
    for user_id in users:
        data = load_user(args.data, user_id=user_id)
        # A fresh copy of the base per user: peft mutates the model it wraps.
        sw = SpecialistWithAdapters(load_causal_lm(args.model, progress=False), cfg)
        global_dir = args.global_dir
        if global_dir is None:
            global_dir = write_adapter(
                work / "v0", sw.get_adapter(GLOBAL), sw.lora_config_dict(), kind=GLOBAL, base=sw.fingerprint, version=0
            ).path
        entries = list(data.profile.entries)
        examples = build_examples(sw.lm, entries, entries, cfg)
        dataset = to_dataset(examples, pad_id=int(sw.lm.tokenizer.pad_token_id or 0), max_len=cfg.max_len)
        t0 = time.perf_counter()
        loss = train_personal(sw, dataset, cfg, seed=0)
        train_seconds = time.perf_counter() - t0
        personal_dir = write_adapter(
            work / user_id, sw.get_adapter(PERSONAL), sw.lora_config_dict(), kind=PERSONAL, base=sw.fingerprint
        ).path
        del sw
        print(
            f"{user_id}: personal adapter, {cfg.personal_steps} steps in {train_seconds:.0f}s, last loss {loss:.3f}",
            flush=True,
        )

        models = {
            "global": apply_adapters(base, global_dir, None),
            "global+personal": apply_adapters(base, global_dir, personal_dir),
        }
        # The drafter on each merged model, as the device builds it (None: torch's own forwards);
        # one conversion folder per label, since a new conversion of a model's weights replaces its last.
        drafters = {
            label: drafter_for(
                args.drafter,
                args.model,
                lm,
                precision=args.drafter_precision,
                cache_dir=work / "drafters" / label,
                from_weights=args.drafter != "torch",
            )
            for label, lm in models.items()
        }
        for query in data.queries[: args.queries]:
            prompt = task_prompt(query["subject"])
            for label, lm in models.items():
                out = generate(Specialist(lm, data.profile, drafter=drafters[label]), prompt, params, options)
                scores = scorer.score(query["target"], out.text)
                row = {
                    "user": user_id,
                    "subject": query["subject"],
                    "adapters": label,
                    "rougeL": scores["rougeL"].fmeasure,
                    "rouge1": scores["rouge1"].fmeasure,
                    "tokens": out.stats.new_tokens,
                    "text": out.text,
                }
                rows.append(row)
                print(f"{user_id} {label:16s} R-L {row['rougeL']:.3f} R-1 {row['rouge1']:.3f}", flush=True)
        rows.append(
            {"user": user_id, "train_seconds": train_seconds, "last_train_loss": loss, "examples": len(examples)}
        )

    result = _summarize(rows, args, cfg, time.perf_counter() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "federation_personalization" + ("_smoke" if args.limit else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(_markdown(result), encoding="utf-8")
    print(_markdown(result))
    return 0


def _summarize(rows: list[dict[str, Any]], args: argparse.Namespace, cfg: TaskConfig, seconds: float) -> dict[str, Any]:
    scored = [r for r in rows if "adapters" in r]
    by = {label: [r for r in scored if r["adapters"] == label] for label in ("global", "global+personal")}
    pairs = list(zip(by["global"], by["global+personal"], strict=True))
    diffs = [b["rougeL"] - a["rougeL"] for a, b in pairs]
    per_user: dict[str, dict[str, float]] = {}
    for user in dict.fromkeys(r["user"] for r in scored):
        mine = [(a, b) for a, b in pairs if a["user"] == user]
        per_user[user] = {
            "rougeL_global": statistics.fmean(a["rougeL"] for a, _ in mine),
            "rougeL_personal": statistics.fmean(b["rougeL"] for _, b in mine),
        }
    sd = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    return {
        "command": "python -m bench.federation_personalization " + " ".join(sys.argv[1:]),
        "model": args.model,
        "users": list(per_user),
        "queries": len(pairs),
        "config": {**cfg.as_run_config(), "max_new_tokens": args.max_new_tokens, "method": "slm-rag (greedy)"},
        "drafter": args.drafter,
        "drafter_precision": (args.drafter_precision or DEFAULT_ONNX_PRECISION) if args.drafter == "onnx" else None,
        "rougeL": {k: statistics.fmean(r["rougeL"] for r in v) for k, v in by.items()},
        "rouge1": {k: statistics.fmean(r["rouge1"] for r in v) for k, v in by.items()},
        "rougeL_diff_mean": statistics.fmean(diffs),
        "rougeL_diff_se": sd / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan,
        "wins_ties_losses": [sum(d > 0 for d in diffs), sum(d == 0 for d in diffs), sum(d < 0 for d in diffs)],
        "per_user": per_user,
        "seconds": seconds,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
        "rows": rows,
    }


def _device_path(r: dict[str, Any]) -> str:
    """Which forwards drafted (a result written before issue 51 has no field: the torch model)."""
    drafter = r.get("drafter", "torch")
    if drafter == "onnx":
        return f"Device path: the merged weights converted to the {r['drafter_precision']} ONNX drafter (what ships)."
    return f"Device path: the merged {drafter} model" + (" (written before issue 51)." if "drafter" not in r else ".")


def _markdown(r: dict[str, Any]) -> str:
    c = r["config"]
    lines = [
        "# Personal adapter: slm-rag with vs without (held-out queries)",
        "",
        f"Command: `{r['command']}`",
        "",
        f"Model {r['model']}; users {', '.join(r['users'])}; {r['queries']} held-out queries; "
        f"{c['personal-steps']} personal steps (batch {c['batch-size']}, lr {c['personal-lr']},"
        f" rank {c['lora-rank']}); "
        f"greedy, {c['max_new_tokens']} new tokens; {r['seconds'] / 60:.1f} min. {_device_path(r)}",
        "",
        "| adapters | ROUGE-L | ROUGE-1 |",
        "| --- | --- | --- |",
    ]
    for label in ("global", "global+personal"):
        lines.append(f"| {label} | {r['rougeL'][label]:.4f} | {r['rouge1'][label]:.4f} |")
    w, t, losses = r["wins_ties_losses"]
    lines += [
        "",
        f"Paired ROUGE-L difference (personal - without): {r['rougeL_diff_mean']:+.4f} "
        f"± {r['rougeL_diff_se']:.4f} (s.e.); wins/ties/losses {w}/{t}/{losses}.",
        "",
        "| user | ROUGE-L without | ROUGE-L with personal |",
        "| --- | --- | --- |",
    ]
    for user, v in r["per_user"].items():
        lines.append(f"| {user} | {v['rougeL_global']:.4f} | {v['rougeL_personal']:.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
