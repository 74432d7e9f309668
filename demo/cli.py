"""`sdk demo`: a personalized generation for the demo user shipped with the SDK.

    sdk demo [--query N] [--in-process] [--audit-dir DIR] [decoding options]

The `sdk` CLI parses the command line (so usage and `--help` stay one) and hands the words after
`demo` to `main` through the `specsteer.sdk_commands` entry point; errors propagate back to it,
and it turns them into one sentence and exit code 1. `python -m demo.cli ...` is `sdk demo ...`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from core.errors import ConfigError
from core.prompts import task_prompt
from demo.run import run_demo_over_tls
from sdk.cli import build_parser, demo_profile_path, print_result, run
from sdk.cli import main as sdk_main
from sdk.context import Profile

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    """Run the demo with the `sdk demo` options in `argv` (the words after `demo`).

    A `SpecSteerError` propagates to the `sdk` CLI, which reports it as one sentence.
    """
    args = build_parser().parse_args(["demo", *argv])
    profile = Profile.from_file(demo_profile_path())
    queries = json.loads(demo_profile_path().read_text(encoding="utf-8"))["queries"]
    if not 0 <= args.query < len(queries):
        raise ConfigError(f"the demo user has queries 0 to {len(queries) - 1}; got {args.query}")
    prompt = task_prompt(queries[args.query]["subject"])
    if not args.json:
        print(f"Prompt (public):\n{prompt}\n\nGenerated ({args.method}):")
    result = run(args, prompt, profile) if args.in_process else run_demo_over_tls(args, prompt, profile)
    print_result(args, result, {"method": args.method, "prompt": prompt})
    return 0


if __name__ == "__main__":
    sys.exit(sdk_main(["demo", *sys.argv[1:]]))
