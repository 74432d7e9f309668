"""`python -m specsteer.server`: the `server` command, as the console script runs it."""

from __future__ import annotations

import sys

from specsteer.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
