"""`python -m demo`: the demo user's generation over mutual TLS, audited and verified (demo/cli.py)."""

import sys

from demo.cli import main

sys.exit(main())
