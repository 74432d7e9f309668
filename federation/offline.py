"""Flower and Hugging Face strictly offline: no telemetry, no update checks, no installs, no hub;
and Flower's own log kept to warnings unless asked for (`quiet_flower`).

Called explicitly where a run starts (the CLI, the in-process simulation, the Flower apps'
handlers) rather than on import, so importing `federation` as a library leaves the caller's
environment alone. Explicit settings already in the environment win.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping

__all__ = ["OFFLINE_ENV", "go_offline", "quiet_flower"]

OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def go_offline(environ: MutableMapping[str, str] | None = None) -> None:
    """Set every offline switch that is not already set in `environ` (default: this process's)."""
    env = os.environ if environ is None else environ
    for key, value in OFFLINE_ENV.items():
        env.setdefault(key, value)


def quiet_flower(verbose: bool) -> None:
    """Flower's own log at WARNING and above, unless `verbose`."""
    if verbose:
        return
    # Flower sets its logger to DEBUG when first imported, so import it before lowering the level.
    import flwr.supercore.logger  # noqa: F401

    logging.getLogger("flwr").setLevel(logging.WARNING)
