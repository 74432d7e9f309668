"""`python -m specsteer.audit`: the `audit` command, as the console script runs it."""

from __future__ import annotations

import sys

from specsteer.audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
