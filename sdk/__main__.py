"""`python -m specsteer.sdk`: the `sdk` command, as the console script runs it."""

from __future__ import annotations

import sys

from specsteer.sdk.cli import main

if __name__ == "__main__":
    sys.exit(main())
