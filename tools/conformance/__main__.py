"""`python -m tools.conformance write FOLDER` | `python -m tools.conformance check FOLDER`.

`write` generates the vectors (the expected outcomes computed by the SDK); `check` replays them
and exits 1 listing every vector the SDK no longer agrees with, each naming its file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from specsteer.core.cli import EXIT_ERROR, EXIT_OK, Parser, reported
from tools.conformance.folder import check_folder, write_folder

PROG = "python -m tools.conformance"


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog=PROG, description="write or replay the conformance vectors for a second SDK")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    sub.add_parser("write", help="generate the vectors into FOLDER (e.g. conformance/v1)").add_argument(
        "folder", type=Path
    )
    sub.add_parser("check", help="replay every vector in FOLDER through the SDK").add_argument("folder", type=Path)
    args = parser.parse_args(argv)

    def run() -> int:
        if args.command == "write":
            write_folder(args.folder)
            print(f"wrote the conformance vectors to {args.folder}")
            return EXIT_OK
        problems = check_folder(args.folder)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"{PROG}: {len(problems)} vector(s) in {args.folder} disagree with the SDK", file=sys.stderr)
            return EXIT_ERROR
        print(f"{args.folder}: every vector agrees with the SDK")
        return EXIT_OK

    return reported(PROG, run)


if __name__ == "__main__":
    sys.exit(main())
