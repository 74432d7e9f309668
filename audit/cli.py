"""`audit`: the device's tamper-evident egress log.

Subcommands arrive with their issues; until then this says so."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="audit", description="the device's tamper-evident egress log")
    parser.parse_args(argv)
    print("audit: no subcommands in this version yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
