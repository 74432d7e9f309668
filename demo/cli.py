"""`python -m demo`: a personalized generation for the demo user shipped with the SDK.

    python -m demo [--query N] [--in-process] [--no-baselines] [--audit-dir DIR] [decoding options]

It ends on the product: what the device alone (`slm-rag`) and the cloud alone (`llm`) would have
written for the same query, each with ROUGE-L against the author's real body, and last, clearly
marked, the SpecSteer text with its stats.

The demo is the repository's, not the wheel's (`make demo` runs it): it takes `sdk generate`'s
decoding options (`specsteer.sdk.cli.add_decoding_options`) and runs its flow, then adds the
verifier process, the audit log and `audit verify`. Errors are one sentence and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demo.run import run_as, run_demo_over_tls
from specsteer.core.cli import command_parser, reported, whole_number
from specsteer.core.errors import ConfigError
from specsteer.core.logs import configure_cli_logging
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import Method
from specsteer.sdk.cli import add_decoding_options, add_fault_options, print_result, run, with_device_defaults
from specsteer.sdk.context import Profile, demo_profile_path

__all__ = ["main"]

# What a user would otherwise have: the private model alone, and the cloud model alone.
BASELINES = {
    Method.SLM_RAG: "Device alone (slm-rag: the Specialist with the private history, no cloud)",
    Method.LLM: "Cloud alone (llm: the Generalist, which never sees the history)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("python -m demo", "personalized generation for the demo user shipped with the SDK")
    parser.add_argument("--query", type=whole_number(), default=0, help="which of the demo user's queries (0-2)")
    parser.add_argument("--in-process", action="store_true", help="run the verifier in this process, no TLS")
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="skip what the device alone (slm-rag) and the cloud alone (llm) would have written",
    )
    parser.add_argument(
        "--audit-dir",
        type=Path,
        help="where the demo keeps its audit log and key (default: a new folder under the cache directory)",
    )
    add_decoding_options(parser)
    add_fault_options(parser)
    parser.set_defaults(max_new_tokens=64, command="demo")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m demo ARGS`: the exit code; a `SpecSteerError` is one sentence and exit code 1."""
    args = with_device_defaults(build_parser().parse_args(list(sys.argv[1:] if argv is None else argv)))
    configure_cli_logging("demo", quiet=args.quiet)
    return reported("demo", lambda: demo(args))


def demo(args: argparse.Namespace) -> int:
    """Run the demo with parsed options; a `SpecSteerError` propagates."""
    profile = Profile.from_file(demo_profile_path())
    queries = json.loads(demo_profile_path().read_text(encoding="utf-8"))["queries"]
    if not 0 <= args.query < len(queries):
        raise ConfigError(f"the demo user has queries 0 to {len(queries) - 1}; got {args.query}")
    prompt = task_prompt(queries[args.query]["subject"])
    reference = queries[args.query].get("target") or None
    method = Method(args.method)
    baselines = [] if args.no_baselines else [m for m in BASELINES if m is not method]
    if not args.json:
        print(f"Prompt (public):\n{prompt}\n")
    if args.in_process:
        result = run(args, prompt, profile)
        others = {m: run_as(args, m, prompt, profile) for m in baselines}
    else:
        result, others = run_demo_over_tls(args, prompt, profile, baselines)
    if args.json:
        extra: dict[str, Any] = {"method": args.method, "prompt": prompt, "rouge_l": rouge_l(result.text, reference)}
        extra["baselines"] = {
            m.value: {"text": g.text, "rouge_l": rouge_l(g.text, reference)} for m, g in others.items()
        }
        print_result(args, result, extra)
        return 0
    if others:
        print("\n──── For comparison, the same query " + "─" * 40)
        for m, generation in others.items():
            print(f"\n{BASELINES[m]}{_score(generation.text, reference)}\n{generation.text.strip()}")
    title = f"SpecSteer ({args.method}): the personalized, cloud-steered text{_score(result.text, reference)}"
    print(f"\n════ {title} ════")
    print_result(args, result, {})
    return 0


def rouge_l(text: str, reference: str | None) -> float | None:
    """ROUGE-L F1 (stemmed, as the benchmarks score) against the author's real body, if known."""
    if reference is None:
        return None
    try:
        from rouge_score import rouge_scorer
    except ImportError:  # the scorer comes with the bench extra; the demo still runs without it
        return None
    return round(rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(reference, text)["rougeL"].fmeasure, 3)


def _score(text: str, reference: str | None) -> str:
    score = rouge_l(text, reference)
    return "" if score is None else f"  [ROUGE-L {score:.3f} against the author's real body]"


if __name__ == "__main__":
    sys.exit(main())
