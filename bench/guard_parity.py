"""The TypeScript egress guard beside the Python one on the guard benchmark's cases (issue 52).

    python -m bench.guard_parity [--data /work/shared/data/commit-bodies-dev.jsonl] [--per-category 10]
                                 [--negatives 200] [--developer-per-kind 10] [--round3-per-category 10]
                                 [--seed 0] [--draft-len 4] [--out docs/results]

The cases are `bench.guard_recall`'s, drawn the same way from the same seeds: the original set with
the dev data's ordinary sentences, the adversarial and identifier sets with their developer
sentences, and the round-3 set with its own. Every case is a session of its own, drafted K tokens a
round by a scripted device whose cloud accepts every draft (`bench.guard_recall.run_text`), each
round planned by the device's guard built from the case's profile (its history, the trailers'
identities, the registered canary). The Python device runs it here; the TypeScript device
(`sdk-js/test/guard-parity.ts`, run with node on the same cases file) runs the same loop on its own
guard; both outcomes are scored by the same functions: recall per category (a span is caught when
no token overlapping it went up in the clear), false positives on ordinary and developer text (a
sentence any token of which did not go up as drafted), and agreement (the same tokens went up, case
by case). Results: docs/results/guard_parity.{md,json}; `make -C sdk-js`'s build must be current
(`make install`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.dataset import first_users
from bench.guard_cases import Sample
from bench.guard_recall import DEFAULT_DATA, draw, run_text, specialist_tokenizer
from specsteer.core.model_registry import DEFAULT_SPECIALIST
from tools.conformance.guard import PROMPT, profile_doc, session_guard

ROOT = Path(__file__).resolve().parents[1]
NODE_SCRIPT = ROOT / "sdk-js" / "dist" / "test" / "guard-parity.js"


def cases(args: argparse.Namespace, tok: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(profiles, cases): `bench.guard_recall`'s draw, each case with its set, category or kind, text,
    token IDs, offsets, spans and profile (the four sets' guards, as guard_recall builds them)."""
    d = draw(
        first_users(args.data),
        args.seed,
        per_category=args.per_category,
        negatives=args.negatives,
        adversarial_per_category=args.per_category,
        developer_per_kind=args.developer_per_kind,
        round3_per_category=args.round3_per_category,
    )
    profiles: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def add(set_name: str, category: str, text: str, spans: Iterable[tuple[int, int]], profile: int) -> None:
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        out.append({"id": len(out), "set": set_name, "category": category, "text": text,
                    "ids": list(enc["input_ids"]), "offsets": [list(o) for o in enc["offset_mapping"]],
                    "spans": [list(s) for s in spans], "profile": profile})  # fmt: skip

    def add_set(name: str, samples: list[Sample], ordinary: Iterable[tuple[str, str]], n_profiles: int) -> None:
        base = len(profiles) - n_profiles  # the set's guards are the last `n_profiles` profiles
        for s in samples:
            add(name, s.category, s.text, s.spans, base + s.profile)
        for i, (kind, text) in enumerate(ordinary):
            add(name, kind, text, [], base + i % n_profiles)

    for p, history in zip(d.persons, d.histories, strict=True):
        trailer = f"Signed-off-by: {p.name} <{p.email}>"
        profiles.append(profile_doc([{"subject": "s", "body": b, "trailers": [trailer]} for b in history], [p.canary]))
    add_set("original", d.samples, (("", text) for text in d.negatives), len(d.persons))
    for persona, dev in zip(d.personas, d.histories, strict=True):
        entries = [{"subject": "s", "body": b, "trailers": [persona.trailer]} for b in [*persona.history, *dev]]
        profiles.append(profile_doc(entries, [persona.canary]))
    add_set("adversarial", d.adv_samples, d.dev_text, len(d.personas))
    add_set("identifiers", d.id_samples, d.id_dev, len(d.personas))
    for r3_persona, dev in zip(d.r3_personas, d.histories, strict=True):
        profiles.append(
            profile_doc([*r3_persona.entries, *({"subject": "s", "body": b, "trailers": []} for b in dev)], [])
        )
    add_set("round3", d.r3_samples, d.r3_dev, len(d.r3_personas))
    return profiles, out


def python_outcomes(profiles: list[dict[str, Any]], items: list[dict[str, Any]], tok: Any, k: int) -> list[list[int]]:
    """Which token indices of each case went up in the clear on the Python device."""
    guards = [session_guard(p, tok, PROMPT, "placeholder", "by-kind") for p in profiles]
    return [sorted(run_text(guards[c["profile"]], tok, c["ids"], k).sent) for c in items]


def typescript_outcomes(doc: dict[str, Any]) -> tuple[list[list[int]], float]:
    """The same on the TypeScript device (node, on a cases file)."""
    if not NODE_SCRIPT.is_file():
        raise SystemExit(f"error: {NODE_SCRIPT} is missing: build the TypeScript package (make install)")
    with tempfile.TemporaryDirectory() as tmp:
        cases_file, out_file = Path(tmp) / "cases.json", Path(tmp) / "out.json"
        cases_file.write_text(json.dumps(doc))
        subprocess.run(["node", str(NODE_SCRIPT), str(cases_file), str(out_file)], check=True, cwd=ROOT / "sdk-js")
        got = json.loads(out_file.read_text())
    return got["sent"], got["seconds"]


def leaked(case: dict[str, Any], sent: list[int]) -> bool:
    """A token overlapping a span went up in the clear (`bench.guard_recall.caught`, negated)."""
    up = set(sent)
    return any(i in up and any(a < e and b > s for s, e in case["spans"]) for i, (a, b) in enumerate(case["offsets"]))


def score(items: list[dict[str, Any]], sent: list[list[int]]) -> dict[str, Any]:
    """Recall per set and category, and false positives per set, of one device's outcomes."""
    recall: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    fp: dict[str, list[bool]] = defaultdict(list)
    for c, s in zip(items, sent, strict=True):
        if c["spans"]:
            recall[c["set"]][c["category"]].append(not leaked(c, s))
        else:
            fp[c["set"]].append(len(s) < len(c["ids"]))
    return {
        "recall": {
            name: {cat: {"caught": sum(v), "n": len(v)} for cat, v in sorted(cats.items())}
            for name, cats in recall.items()
        },
        "false_positives": {name: {"false_positives": sum(v), "n": len(v)} for name, v in fp.items()},
    }


def render(result: dict[str, Any]) -> str:
    py, ts = result["python"], result["typescript"]
    lines = [
        "# The TypeScript egress guard beside the Python guard (issue 52)",
        "",
        f"Command: `{result['command']}`; tokenizer {result['tokenizer']}, K = {result['draft_len']}, "
        f"{result['cases']} cases, each a session of its own (bench/guard_parity.py says how).",
        "",
        f"**Agreement: {result['agree']} of {result['cases']} cases sent exactly the same tokens up in the clear.** "
        f"Python {result['python_seconds']:.0f} s, TypeScript {result['typescript_seconds']:.0f} s.",
        "",
        "| set | category | n | caught (Python) | caught (TypeScript) |",
        "|---|---|---|---|---|",
    ]
    for name, cats in py["recall"].items():
        for cat, r in cats.items():
            t = ts["recall"][name][cat]
            lines.append(f"| {name} | {cat} | {r['n']} | {r['caught']} | {t['caught']} |")
    total_py = sum(r["caught"] for cats in py["recall"].values() for r in cats.values())
    total_ts = sum(r["caught"] for cats in ts["recall"].values() for r in cats.values())
    n = sum(r["n"] for cats in py["recall"].values() for r in cats.values())
    lines += [
        f"| **all** | | {n} | {total_py} ({total_py / max(n, 1):.3f}) | {total_ts} ({total_ts / max(n, 1):.3f}) |",
        "",
    ]
    lines += ["| set | ordinary or developer sentences | false positives (Python) | false positives (TypeScript) |",
              "|---|---|---|---|"]  # fmt: skip
    for name, r in py["false_positives"].items():
        t = ts["false_positives"][name]
        lines.append(f"| {name} | {r['n']} | {r['false_positives']} | {t['false_positives']} |")
    if result["disagreements"]:
        lines += ["", "Cases where the two devices sent different tokens (first 20):", ""]
        for d in result["disagreements"][:20]:
            lines.append(f"- {d['set']} / {d['category'] or 'ordinary'}: `{d['text']}`: Python sent {d['python']}, "
                         f"TypeScript {d['typescript']} of {d['tokens']} tokens")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--per-category", type=int, default=10)
    parser.add_argument("--negatives", type=int, default=200)
    parser.add_argument("--developer-per-kind", type=int, default=10)
    parser.add_argument("--round3-per-category", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args(list(argv) if argv is not None else None)
    if not args.data.is_file():
        print(f"error: no data file at {args.data}", file=sys.stderr)
        return 1
    tok = specialist_tokenizer()
    profiles, items = cases(args, tok)
    start = time.perf_counter()
    py_sent = python_outcomes(profiles, items, tok, args.draft_len)
    py_seconds = time.perf_counter() - start
    doc = {
        "bundle": DEFAULT_SPECIALIST,
        "prompt": PROMPT,
        "draft_len": args.draft_len,
        "eos_id": tok.eos_token_id,
        "profiles": profiles,
        "cases": [{"id": c["id"], "profile": c["profile"], "ids": c["ids"]} for c in items],
    }
    ts_sent, ts_seconds = typescript_outcomes(doc)
    disagreements = [
        {"set": c["set"], "category": c["category"], "text": c["text"], "tokens": len(c["ids"]),
         "python": len(p), "typescript": len(t)}
        for c, p, t in zip(items, py_sent, ts_sent, strict=True) if p != t
    ]  # fmt: skip
    skip = {"data", "out"}
    result = {
        "command": "python -m bench.guard_parity "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in skip),
        "tokenizer": DEFAULT_SPECIALIST,
        "draft_len": args.draft_len,
        "cases": len(items),
        "agree": len(items) - len(disagreements),
        "python": score(items, py_sent),
        "typescript": score(items, ts_sent),
        "python_seconds": py_seconds,
        "typescript_seconds": ts_seconds,
        "disagreements": disagreements,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "guard_parity.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    (args.out / "guard_parity.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
