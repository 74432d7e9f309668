"""`sdk demo`: a personalized generation for the demo user shipped with the SDK.

    sdk demo [--query N] [--in-process] [--audit-dir DIR] [decoding options]

The `sdk` CLI parses the command line (so usage and `--help` stay one) and hands the words after
`demo` to `main` through the `specsteer.sdk_commands` entry point; `python -m demo.cli` takes the
same words.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from core.errors import ConfigError, SpecSteerError
from core.prompts import task_prompt
from demo.run import run_demo_over_tls
from sdk.cli import EXIT_ERROR, build_parser, demo_profile_path, print_result, run
from sdk.context import Profile

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo with the `sdk demo` options in `argv` (the words after `demo`)."""
    args = build_parser().parse_args(["demo", *(sys.argv[1:] if argv is None else argv)])
    try:
        profile = Profile.from_file(demo_profile_path())
        queries = json.loads(demo_profile_path().read_text(encoding="utf-8"))["queries"]
        if not 0 <= args.query < len(queries):
            raise ConfigError(f"the demo user has queries 0 to {len(queries) - 1}; got {args.query}")
        prompt = task_prompt(queries[args.query]["subject"])
        if not args.json:
            print(f"Prompt (public):\n{prompt}\n\nGenerated ({args.method}):")
        result = run(args, prompt, profile) if args.in_process else run_demo_over_tls(args, prompt, profile)
        print_result(args, result, {"method": args.method, "prompt": prompt})
    except SpecSteerError as exc:
        print(f"sdk: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("sdk: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
