"""`sdk`: run SpecSteer and its baselines from the command line.

    sdk generate --prompt TEXT [--profile FILE] [--method specsteer] [--json] ...
    sdk demo                      # a personalized generation for the shipped demo user

Without `--server`, the cloud verifier runs in this process (through the wire format).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sdk.context import Profile
from sdk.device import DecodeOptions, Generation, Specialist, generate
from sdk.errors import ConfigError, SpecSteerError
from sdk.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from sdk.prompts import task_prompt
from sdk.session_types import CandidatePolicy, Method, SessionParams
from sdk.transport import InProcessVerifier

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("NaN is not allowed")
    return value


def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="specsteer", choices=[m.value for m in Method], help="decoding method")
    p.add_argument("--gamma", type=_float, default=0.5, help="acceptance threshold (0 = accept all, inf = none)")
    p.add_argument("--alpha", type=_float, default=1.0, help="steering strength")
    p.add_argument("--top-k", type=int, default=10, help="steering candidates per recovery")
    p.add_argument("--draft-len", type=int, default=4, help="K, tokens drafted per round")
    p.add_argument("--policy", default="guardrail", choices=[c.value for c in CandidatePolicy])
    p.add_argument("--no-bonus", action="store_true", help="no steered token after a fully accepted draft")
    p.add_argument("--sampling", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=_float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST, help="folder, .gguf file or embedded name")
    p.add_argument("--generalist", default=DEFAULT_GENERALIST, help="folder, .gguf file or embedded name")
    p.add_argument("--cache-dir", type=Path, default=None, help="where converted models are kept")
    p.add_argument("--context-entries", type=int, default=3, help="profile entries retrieved as context")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sdk", description="SpecSteer on-device SDK")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("generate", help="generate text for a prompt")
    gen.add_argument("--prompt", required=True, help="the public prompt (sent to the cloud as token IDs)")
    gen.add_argument("--profile", type=Path, help="the user's private history (JSON/JSONL; stays on the device)")
    _add_decoding_options(gen)
    demo = sub.add_parser("demo", help="personalized generation for the demo user shipped with the SDK")
    demo.add_argument("--query", type=int, default=0, help="which of the demo user's queries (0-2)")
    _add_decoding_options(demo)
    demo.set_defaults(max_new_tokens=64)
    return parser


def session_params(args: argparse.Namespace) -> SessionParams:
    """Map CLI options to session parameters; fusion and llm decide every token in the cloud (K = 0)."""
    method = Method(args.method)
    return SessionParams(
        method=method,
        sampling=args.sampling,
        gamma=args.gamma,
        alpha=0.0 if method is Method.LLM else args.alpha,
        top_k=args.top_k,
        draft_len=0 if method in (Method.FUSION, Method.LLM) else args.draft_len,
        policy=CandidatePolicy(args.policy),
        bonus=not args.no_bonus,
    )


@dataclass
class LocalRun:
    """Specialist and, when the method needs it, an in-process cloud verifier."""

    specialist: Specialist
    verifier: InProcessVerifier | None


def build_local(
    specialist_lm: CausalLM, generalist_lm: CausalLM | None, profile: Profile | None, seed: int, context_entries: int
) -> LocalRun:
    specialist = Specialist(specialist_lm, profile, context_entries=context_entries)
    if generalist_lm is None:
        return LocalRun(specialist, None)
    # Device code never imports the server; the in-process mode is the one place that joins them.
    from server.session import CloudVerifier

    # The cloud's generic Specialist copy has the same base weights: in one process, share them.
    cloud = CloudVerifier(generalist_lm, specialist_lm, seed=seed)
    return LocalRun(specialist, InProcessVerifier(cloud.open, vocab_size=specialist_lm.vocab_size))


def run(args: argparse.Namespace, prompt: str, profile: Profile | None) -> Generation:
    params = session_params(args)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    if args.context_entries < 0:
        raise ConfigError(f"context-entries must be 0 or more; got {args.context_entries}")
    if not prompt.strip():
        raise ConfigError("the prompt is empty")
    _log(args, f"loading Specialist {args.specialist}")
    s_lm = load_causal_lm(args.specialist, cache_dir=args.cache_dir)
    g_lm = None
    if params.method.uses_cloud:
        _log(args, f"loading Generalist {args.generalist}")
        g_lm = load_causal_lm(args.generalist, cache_dir=args.cache_dir)
    local = build_local(s_lm, g_lm, profile, args.seed, args.context_entries)
    _log(args, f"generating with {params.method.value}")
    return generate(local.specialist, prompt, params, options, local.verifier)


def _log(args: argparse.Namespace, message: str) -> None:
    print(f"sdk: {message}", file=sys.stderr, flush=True)


def _print(args: argparse.Namespace, result: Generation, extra: dict[str, object]) -> None:
    if args.json:
        print(
            json.dumps(
                {**extra, "text": result.text, "token_ids": result.token_ids, "stats": result.stats.as_dict()},
                ensure_ascii=False,
            )
        )
        return
    print(result.text)
    print()
    for key, value in result.stats.as_dict().items():
        print(f"  {key}: {value}")


def demo_profile_path() -> Path:
    return Path(str(resources.files("sdk").joinpath("data/demo_profile.json")))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            profile = Profile.from_file(demo_profile_path())
            queries = json.loads(demo_profile_path().read_text(encoding="utf-8"))["queries"]
            if not 0 <= args.query < len(queries):
                raise ConfigError(f"the demo user has queries 0 to {len(queries) - 1}; got {args.query}")
            prompt = task_prompt(queries[args.query]["subject"])
            if not args.json:
                print(f"Prompt (public):\n{prompt}\n\nGenerated ({args.method}):")
            result = run(args, prompt, profile)
            _print(args, result, {"method": args.method, "prompt": prompt})
        else:
            profile = Profile.from_file(args.profile) if args.profile is not None else None
            result = run(args, args.prompt, profile)
            _print(args, result, {"method": args.method})
    except SpecSteerError as exc:
        print(f"sdk: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("sdk: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
