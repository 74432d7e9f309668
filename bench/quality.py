"""Quality benchmark (the shape of the paper's Table 2) on real data, with paired intervals.

    python -m bench.quality [--data ../shared/data/commit-bodies-dev.jsonl] [--users 12] [--queries-per-user 2]
                            [--max-new-tokens 64] [--runs RUNS.jsonl] [--out docs/results]
    python -m bench.quality --report-only --runs RUNS.jsonl --out docs/results   # tables from what is done

Every method runs on the main pair (`--specialist` -> `--generalist`, greedy); the alternative
Specialist (`--alt-specialist`) adds its `slm-rag` and `specsteer` rows, so both pairs (the
cross-vocabulary SmolLM2 and the same-vocabulary Qwen2.5-Coder 0.5B) are measured on the same queries.
Queries go round-robin over users (each user's first query, then each user's second), and a
first pass runs only the rows of the central comparison (`slm-rag`, `llm`, `specsteer`) on every
query before a second pass adds the others, so a partial run has as many paired queries and
authors as possible. Each finished generation is appended to the runs
log at once (a rerun skips what is there), and the tables are rewritten after every query:
ROUGE-1/ROUGE-L means with standard errors, and the paired differences `specsteer - slm-rag` and
`specsteer - llm` over the same queries with 95 % bootstrap intervals.

The device runs what ships unless told otherwise (issue #51): the SDK's default drafter at its
default precision (`sdk.drafters`: onnx int4) behind the default egress guard
(`sdk.uplink_guard.DEFAULT_GUARD_SETTING`); `--drafter`, `--drafter-precision` and `--guard`
choose another path. Every row records the path it ran, and the tables count the rows per path
(rows from before issue #51 recorded none: they ran torch without a guard).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rouge_score import rouge_scorer

from bench.plotting import figure
from specsteer.core.linear import LINEAR_KERNELS, resolve_linear_kernel
from specsteer.core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Drafter, Specialist, generate
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DEFAULT_ONNX_PRECISION, DRAFTERS, ONNX_PRECISIONS, drafter_for
from specsteer.sdk.transport import InProcessVerifier
from specsteer.sdk.uplink_guard import DEFAULT_GUARD_SETTING, GUARD_SETTINGS, guard_setting
from specsteer.server.session import CloudVerifier

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "commit-bodies-dev.jsonl"
# The two candidate Specialists; the `alt` rows run the one that is not `--specialist`.
CANDIDATE_SPECIALISTS = ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")
BOOTSTRAP_RESAMPLES = 10_000
SPECSTEER = "specsteer gamma=0.5"  # the row the paired differences are about (the default setting)


@dataclass(frozen=True)
class Config:
    label: str
    params: SessionParams
    pair: str = "main"  # "main": --specialist; "alt": --alt-specialist
    full_vocab: bool = False  # k = the Specialist's vocabulary size (in process the verifier allows it)
    first_pass: bool = False  # run for every query before the other rows (the paired comparison)


CONFIGS: tuple[Config, ...] = (
    Config("slm", SessionParams(method=Method.SLM)),
    Config("slm-rag", SessionParams(method=Method.SLM_RAG), first_pass=True),
    Config("llm", SessionParams(method=Method.LLM, draft_len=0, alpha=0.0), first_pass=True),
    Config(SPECSTEER, SessionParams(gamma=0.5), first_pass=True),
    Config("specsteer gamma=0.1", SessionParams(gamma=0.1)),
    Config("specsteer gamma=0.5 literal", SessionParams(gamma=0.5, policy=CandidatePolicy.LITERAL)),
    Config("alt slm-rag", SessionParams(method=Method.SLM_RAG), pair="alt"),
    Config("alt specsteer gamma=0.5", SessionParams(gamma=0.5), pair="alt"),
    # The slowest rows last.
    Config("sd (K=4)", SessionParams(method=Method.SD)),
    # algorithm.md's fusion: z_G + alpha (z_S^c - z_S^0) over the whole vocabulary at every token.
    Config("fusion (alpha=1, full vocabulary)", SessionParams(method=Method.FUSION, draft_len=0), full_vocab=True),
)

Key = tuple[str, str, str, int]


def device_path(
    drafter: str = DEFAULT_DRAFTER, precision: str | None = None, guard: str = DEFAULT_GUARD_SETTING
) -> dict:
    """The device path a benchmark ran, as its results record it: the drafter, its precision (the
    onnx drafter's default resolved) and the egress guard; `shipped` when all three are what
    `sdk generate` runs without flags."""
    resolved = precision or (DEFAULT_ONNX_PRECISION if drafter == "onnx" else None)
    shipped = (
        drafter == DEFAULT_DRAFTER and resolved in (None, DEFAULT_ONNX_PRECISION) and guard == DEFAULT_GUARD_SETTING
    )
    return {"drafter": drafter, "drafter_precision": resolved, "guard": guard, "shipped": shipped}


def rows_device_paths(rows: Sequence[dict]) -> dict[str, int]:
    """How many of `rows` ran each device path (`device_path`'s label); rows written before the
    runs logs recorded it (issue #51) ran torch without a guard."""
    counts: dict[str, int] = {}
    for r in rows:
        if "guard" in r:
            label = device_path_label(device_path(r["drafter"], r.get("drafter_precision"), r["guard"]))
        else:
            label = "torch, no guard (not recorded: before issue #51)"
        counts[label] = counts.get(label, 0) + 1
    return counts


def device_path_label(path: dict) -> str:
    drafter = " ".join(str(v) for v in (path["drafter"], path["drafter_precision"]) if v)
    which = "the shipped default" if path["shipped"] else "not the shipped default"
    return f"drafter {drafter}, guard {path['guard']} ({which})"


def device_path_line(counts: dict[str, int]) -> str:
    """One sentence for a results page: which device path its rows ran."""
    return "Device path of the rows: " + "; ".join(f"{label}: {n}" for label, n in counts.items()) + "."


def load_queries(path: Path, users: int, per_user: int, *, skip_users: int = 0) -> list[tuple[dict, dict]]:
    """(user, query) pairs: queries 0..per_user-1 of users skip_users..skip_users+users-1, round-robin
    (every user's first query before any second one)."""
    with path.open(encoding="utf-8") as f:
        chosen = [json.loads(line) for line in list(f)[skip_users : skip_users + users]]
    return [(user, user["queries"][i]) for i in range(per_user) for user in chosen if i < len(user["queries"])]


class Pairs:
    """Loads each model once and keeps one in-process verifier per Specialist."""

    def __init__(
        self,
        generalist: str,
        quantize: str = "fp32",
        linear_kernel: str | None = None,
        drafter: str = DEFAULT_DRAFTER,
        drafter_precision: str | None = None,
        guard: str = DEFAULT_GUARD_SETTING,
    ) -> None:
        self._generalist_name = generalist
        self._quantize = quantize
        self._linear_kernel = linear_kernel
        self.drafter_kind = drafter
        self.drafter_precision = drafter_precision
        self.guard = guard
        self._lms: dict[str, CausalLM] = {}
        self._drafters: dict[str, Drafter | None] = {}
        self._verifiers: dict[str, InProcessVerifier] = {}

    def lm(self, name: str) -> CausalLM:
        if name not in self._lms:
            self._lms[name] = load_causal_lm(name, quantize=self._quantize, linear_kernel=self._linear_kernel)
        return self._lms[name]

    def drafter(self, specialist: str) -> Drafter | None:
        """The device's drafter for `specialist` (None: its torch model drafts)."""
        if specialist not in self._drafters:
            self._drafters[specialist] = drafter_for(
                self.drafter_kind, specialist, self.lm(specialist), precision=self.drafter_precision
            )
        return self._drafters[specialist]

    def verifier(self, specialist: str) -> InProcessVerifier:
        if specialist not in self._verifiers:
            s_lm = self.lm(specialist)
            cloud = CloudVerifier(self.lm(self._generalist_name), s_lm, seed=0)
            self._verifiers[specialist] = InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size)
        return self._verifiers[specialist]


def run_one(
    pairs: Pairs,
    specialist_name: str,
    user: dict,
    query: dict,
    params: SessionParams,
    max_new_tokens: int,
    *,
    full_vocab: bool = False,
) -> dict:
    """One generation, scored against the author's real body; the row the runs log keeps."""
    s_lm = pairs.lm(specialist_name)
    profile = Profile.from_obj(user, source=user["user_id"])
    specialist = Specialist(s_lm, profile, drafter=pairs.drafter(specialist_name))
    if full_vocab:
        params = replace(params, top_k=s_lm.vocab_size)
    verifier = pairs.verifier(specialist_name) if params.method.uses_cloud else None
    # The guard `sdk generate` runs on the uplink (nothing goes up without a verifier).
    guard = None if verifier is None else guard_setting(profile, s_lm.tokenizer, pairs.guard)
    out = generate(
        specialist, task_prompt(query["subject"]), params, DecodeOptions(max_new_tokens), verifier, guard=guard
    )
    scores = _SCORER.score(query["target"], out.text)
    return {
        "user": user["user_id"],
        "subject": query["subject"],
        "specialist": specialist_name,
        "max_new_tokens": max_new_tokens,
        "rouge1": scores["rouge1"].fmeasure,
        "rougeL": scores["rougeL"].fmeasure,
        "text": out.text,
        **device_path(pairs.drafter_kind, pairs.drafter_precision, pairs.guard),
        **out.stats.as_dict(),
    }


_SCORER = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)


class RunsLog:
    """A benchmark's runs log: one finished generation a JSON line, appended the moment it is done,
    so a rerun skips what is there (`bench.quality`, and `bench.sweep` with its own log).

    Rows are keyed by (user, subject, label, max new tokens): a rerun with another length does not
    mix in rows of the old one. `field` is the row's label field (`config`; the sweep's `setting`).
    """

    def __init__(self, path: Path, field: str) -> None:
        self.path = path
        self.field = field
        self.done: dict[Key, dict] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.done[(row["user"], row["subject"], row[field], row.get("max_new_tokens", 0))] = row

    def run(
        self,
        pairs: Pairs,
        specialist_name: str,
        user: dict,
        query: dict,
        label: str,
        params: SessionParams,
        max_new_tokens: int,
        *,
        full_vocab: bool = False,
        step: str = "",
        width: int = 36,
    ) -> None:
        """`run_one` under `label` unless the log has it; appended and reported on one line at once."""
        key = (user["user_id"], query["subject"], label, max_new_tokens)
        if key in self.done:
            return
        row = {
            self.field: label,
            **run_one(pairs, specialist_name, user, query, params, max_new_tokens, full_vocab=full_vocab),
        }
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        self.done[key] = row
        print(
            f"[{time.strftime('%H:%M:%S')}] {step}{user['user_id']} {label:{width}s} "
            f"R-L {row['rougeL']:.3f} acc {row['acceptance_rate']:.2f} {row['new_tokens']} tok "
            f"{row['seconds']:.0f}s",
            flush=True,
        )


def add_device_path_options(p: argparse.ArgumentParser) -> None:
    """--drafter, --drafter-precision and --guard, defaulting to what `sdk generate` runs."""
    p.add_argument(
        "--drafter", choices=DRAFTERS, default=DEFAULT_DRAFTER, help="the device's forwards (default: what ships)"
    )
    p.add_argument("--drafter-precision", choices=ONNX_PRECISIONS, default=None, help="onnx drafter: its default")
    p.add_argument(
        "--guard", choices=GUARD_SETTINGS, default=DEFAULT_GUARD_SETTING, help="the egress guard (default: what ships)"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.quality", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    # 24 queries x 10 configurations: many hours on 2 shared cores (each query 10-20 min); resumable.
    p.add_argument("--users", type=int, default=12)
    p.add_argument("--queries-per-user", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="at most this many queries (a quick run)")
    p.add_argument("--configs", nargs="*", default=None, help="labels to run (default: all)")
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--runs", type=Path, default=None, help="the runs log (default: OUT/quality.runs.jsonl)")
    p.add_argument("--report-only", action="store_true", help="write the tables from the runs log, generate nothing")
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--alt-specialist", default=None, help="default: the other candidate Specialist")
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--quantize", choices=["fp32", "int8"], default="fp32", help="every model's Linear layers")
    p.add_argument(
        "--linear-kernel", choices=LINEAR_KERNELS, default=None, help="fp32 Linear kernel (core.linear; default auto)"
    )
    add_device_path_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.data.is_file():
        print(f"bench.quality: error: no data file at {args.data}", file=sys.stderr)
        return 1
    queries = load_queries(args.data, args.users, args.queries_per_user)[: args.limit]
    configs = [c for c in CONFIGS if args.configs is None or c.label in args.configs]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = RunsLog(args.runs if args.runs is not None else args.out / "quality.runs.jsonl", "config")
    command = "python -m bench.quality " + " ".join(argv if argv is not None else sys.argv[1:])
    alt = args.alt_specialist or next(n for n in CANDIDATE_SPECIALISTS if n != args.specialist)
    names = {"main": args.specialist, "alt": alt}

    pairs = Pairs(args.generalist, args.quantize, args.linear_kernel, args.drafter, args.drafter_precision, args.guard)
    started = time.perf_counter()
    passes = [todo for todo in ([c for c in configs if c.first_pass], [c for c in configs if not c.first_pass]) if todo]
    total = len(queries) * len(passes)
    for number, (user, query, todo) in enumerate([(u, q, todo) for todo in passes for u, q in queries], 1):
        if args.report_only:
            break
        for config in todo:
            runs.run(
                pairs,
                names[config.pair],
                user,
                query,
                config.label,
                config.params,
                args.max_new_tokens,
                full_vocab=config.full_vocab,
                step=f"step {number}/{total} ",
            )
        write_report(args, queries, configs, runs.done, names, command, time.perf_counter() - started)
    write_report(args, queries, configs, runs.done, names, command, time.perf_counter() - started)
    print(f"wrote {args.out}/quality.md, quality.json, quality.png", flush=True)
    return 0


def write_report(
    args: argparse.Namespace,
    queries: list[tuple[dict, dict]],
    configs: list[Config],
    done: dict[Key, dict],
    names: dict[str, str],
    command: str,
    seconds: float,
) -> None:
    """The tables from every finished generation of the planned queries: each row's mean is over
    the queries it has finished (its n), each paired difference over the queries both have."""
    labels = [c.label for c in configs]
    rows = [
        done[(u["user_id"], q["subject"], label, args.max_new_tokens)]
        for u, q in queries
        for label in labels
        if (u["user_id"], q["subject"], label, args.max_new_tokens) in done
    ]
    complete = complete_queries(queries, labels, done, args.max_new_tokens)
    summary = summarize(rows, labels)
    paired = paired_differences(rows, [label for label in labels if "specsteer" in label])
    meta = {
        "command": command,
        "queries_planned": len(queries),
        "queries_complete": len(complete),
        "users_complete": len({u["user_id"] for u, _ in complete}),
        "max_new_tokens": args.max_new_tokens,
        "specialist": names["main"],
        "alt_specialist": names["alt"],
        "generalist": args.generalist,
        "quantize": args.quantize,
        "linear_kernel": resolve_linear_kernel(args.linear_kernel) if args.quantize == "fp32" else None,
        # This command's device path; `rows_device_paths` what the rows in the tables ran.
        "device_path": device_path(args.drafter, args.drafter_precision, args.guard),
        "rows_device_paths": rows_device_paths(rows),
        "wall_seconds_this_run": round(seconds, 1),
        "bootstrap_resamples": BOOTSTRAP_RESAMPLES,
        "configs": [
            {
                "label": c.label,
                "specialist": names[c.pair],
                **{k: str(v) for k, v in asdict(c.params).items()},
                **({"top_k": "vocabulary size"} if c.full_vocab else {}),
            }
            for c in configs
        ],
    }
    (args.out / "quality.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "paired": paired}, indent=2) + "\n"
    )
    (args.out / "quality.md").write_text(markdown(summary, paired, meta))
    if summary:
        plot(summary, args.out / "quality.png")


def complete_queries(
    queries: list[tuple[dict, dict]], labels: Sequence[str], done: dict[Key, dict], max_new_tokens: int
) -> list[tuple[dict, dict]]:
    """The queries every one of `labels` has finished."""
    return [
        (u, q)
        for u, q in queries
        if all((u["user_id"], q["subject"], label, max_new_tokens) in done for label in labels)
    ]


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error (sample sd / sqrt n; 0 for a single value)."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


def bootstrap_ci(diffs: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the mean of `diffs`, resampling queries with replacement."""
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(statistics.fmean(rng.choices(diffs, k=n)) for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[math.ceil(0.975 * (resamples - 1))]


def scores(rows: list[dict]) -> dict:
    """Over finished generations (one per query): their number, ROUGE-1 and ROUGE-L means with
    standard errors, the acceptance of every drafted token, and tokens per second."""
    r1, r1_se = mean_se([r["rouge1"] for r in rows])
    rl, rl_se = mean_se([r["rougeL"] for r in rows])
    drafted = sum(r["drafted"] for r in rows)
    return {
        "n": len(rows),
        "rouge1": r1,
        "rouge1_se": r1_se,
        "rougeL": rl,
        "rougeL_se": rl_se,
        "acceptance": sum(r["accepted"] for r in rows) / drafted if drafted else math.nan,
        "tokens_per_second": sum(r["new_tokens"] for r in rows) / max(1e-9, sum(r["seconds"] for r in rows)),
    }


def summarize(rows: list[dict], labels: list[str]) -> list[dict]:
    """Per config: ROUGE means with standard errors over queries, acceptance, speed."""
    out = []
    for label in labels:
        mine = [r for r in rows if r["config"] == label]
        if not mine:
            continue
        out.append(
            {
                "config": label,
                "specialist": mine[0].get("specialist", ""),
                **scores(mine),
                "uplink_bytes_per_token": sum(r["uplink_bytes"] for r in mine)
                / max(1, sum(r["new_tokens"] for r in mine)),
                "downlink_bytes_per_token": sum(r["downlink_bytes"] for r in mine)
                / max(1, sum(r["new_tokens"] for r in mine)),
            }
        )
    return out


def paired_difference(rows: list[dict], row: str, minus: str, metric: str) -> dict | None:
    """`row` minus `minus` on `metric`, query by query (same user and subject): the mean, its 95 %
    bootstrap interval, and how often `row` won or lost; None where no query has both."""
    by_key = {(r["user"], r["subject"], r["config"]): r for r in rows}
    queries = sorted({(r["user"], r["subject"]) for r in rows})
    diffs = [
        by_key[(u, s, row)][metric] - by_key[(u, s, minus)][metric]
        for u, s in queries
        if (u, s, row) in by_key and (u, s, minus) in by_key
    ]
    if not diffs:
        return None
    low, high = bootstrap_ci(diffs)
    return {
        "row": row,
        "minus": minus,
        "metric": metric,
        "n": len(diffs),
        "mean": statistics.fmean(diffs),
        "ci95": [low, high],
        "wins": sum(d > 0 for d in diffs),
        "losses": sum(d < 0 for d in diffs),
    }


def paired_differences(rows: list[dict], subjects: list[str]) -> list[dict]:
    """For each specsteer row: its per-query difference from `slm-rag` and from `llm` (same query,
    same metric), mean and 95 % bootstrap interval. Pairing removes the query-difficulty variance
    that dominates the per-config standard errors."""
    out = []
    for subject in subjects:
        baselines = ["slm-rag", "llm"] if not subject.startswith("alt ") else ["alt slm-rag", "slm-rag", "llm"]
        for baseline in baselines:
            for metric in ("rougeL", "rouge1"):
                diff = paired_difference(rows, subject, baseline, metric)
                if diff is not None:
                    out.append(diff)
    return out


def markdown(summary: list[dict], paired: list[dict], meta: dict) -> str:
    lines = [
        "# Quality: ROUGE on commit-bodies-dev (greedy)",
        "",
        f"`{meta['command']}` — {meta['queries_complete']} of {meta['queries_planned']} planned queries have every "
        f"row done (from {meta['users_complete']} users); each row's n counts the queries it has finished, "
        "each paired difference the queries both rows have; "
        f"max {meta['max_new_tokens']} new tokens, {meta.get('quantize', 'fp32')}, Generalist `{meta['generalist']}`, "
        f"Specialist `{meta['specialist']}` (rows prefixed `alt`: `{meta['alt_specialist']}`).",
        "",
        device_path_line(meta.get("rows_device_paths", {})),
        "",
        "| config | n | ROUGE-1 (± se) | ROUGE-L (± se) | acceptance | tok/s | uplink B/token | downlink B/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        acc = "—" if math.isnan(s["acceptance"]) else f"{s['acceptance']:.2f}"
        lines.append(
            f"| {s['config']} | {s['n']} | {s['rouge1']:.3f} ± {s['rouge1_se']:.3f} | "
            f"{s['rougeL']:.3f} ± {s['rougeL_se']:.3f} | {acc} | {s['tokens_per_second']:.2f} | "
            f"{s['uplink_bytes_per_token']:.1f} | {s['downlink_bytes_per_token']:.0f} |"
        )
    lines += [
        "",
        f"Paired differences over the same queries (mean, 95 % bootstrap interval of {meta['bootstrap_resamples']:,} "
        "resamples of queries, wins/losses):",
        "",
        "| row | minus | metric | n | mean diff | 95 % interval | wins / losses |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in paired:
        lines.append(
            f"| {d['row']} | {d['minus']} | {d['metric']} | {d['n']} | {d['mean']:+.3f} | "
            f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] | {d['wins']} / {d['losses']} |"
        )
    return "\n".join(lines) + "\n"


def plot(summary: list[dict], path: Path) -> None:
    with figure(path, (10, 4.5)) as ax:
        labels = [s["config"] for s in summary]
        means = [s["rougeL"] for s in summary]
        errs = [s["rougeL_se"] for s in summary]
        ax.bar(range(len(labels)), means, yerr=errs, capsize=4, color="#4c72b0")
        ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("ROUGE-L (bars: standard error)")
        ax.set_title("Quality on commit-bodies-dev")


if __name__ == "__main__":
    sys.exit(main())
