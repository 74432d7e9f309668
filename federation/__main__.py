"""`python -m specsteer.federation`: the `federation` command, as the console script runs it."""

from __future__ import annotations

import sys

from specsteer.federation.cli import main

if __name__ == "__main__":
    sys.exit(main())
