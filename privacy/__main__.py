"""`python -m specsteer.privacy`: the `privacy` command, as the console script runs it."""

from __future__ import annotations

import sys

from specsteer.privacy.cli import main

if __name__ == "__main__":
    sys.exit(main())
