"""SpecSteer's one logger hierarchy, and how the command lines show it.

Every library module logs under `specsteer` (`logging.getLogger("specsteer.sdk")`,
`"specsteer.federation.rounds"`, ...) and never installs a handler: an app that embeds the SDK
decides what it sees, as with any library. Progress (a model loading, a conversion, a round that
ended) is INFO; what the user should know although the command goes on is WARNING.

The CLIs call `configure_cli_logging` once, first: INFO and above go to stderr as
`PROG: message`, one line each, so stdout holds only the command's result (`sdk generate ... >
body.txt` captures the text alone). `--quiet` keeps WARNING and above; `--verbose` adds DEBUG.
A failure is still printed as one sentence by `core.cli.reported`, whatever the level.

Third-party progress bars (transformers' "Loading weights") are switched off while a model loads
(`transformers_bars_off`): the library prints one line of its own instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

__all__ = ["ROOT", "configure_cli_logging", "transformers_bars_off"]

ROOT = "specsteer"


class _StderrHandler(logging.Handler):
    """Writes each record as one line to whatever `sys.stderr` is when it is emitted (a test's capture too)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def configure_cli_logging(prog: str, *, quiet: bool = False, verbose: bool = False) -> logging.Logger:
    """Show the `specsteer` loggers' records on stderr as `PROG: message`; returns the root logger.

    `quiet`: warnings and errors only (no progress); `verbose`: debug records too. Calling it again
    (a second command in one process, as tests do) replaces the handler it installed before.
    """
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrHandler):
            logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(f"{prog}: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    if not verbose:
        # Hugging Face's own chatter (progress bars, advisory warnings) is not the user's business
        # on a command line; read at import, and set on the modules already imported.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
    return logger


@contextlib.contextmanager
def transformers_bars_off() -> Iterator[None]:
    """transformers' progress bars off for the block (a load or a conversion), then as they were."""
    from transformers.utils import logging as hf_logging

    if not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()
