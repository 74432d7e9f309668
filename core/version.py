"""The installed distribution's version, or the source tree's when the code runs from a checkout.

In core so that every CLI's `--version` (core.cli) reads it without importing the device SDK;
`sdk.__version__` re-exports it.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["DISTRIBUTION", "__version__"]

DISTRIBUTION = "specsteer-sdk"


def _source_version() -> str:
    """The version pyproject.toml declares, for a checkout on PYTHONPATH that was never installed."""
    try:
        with (Path(__file__).resolve().parents[1] / "pyproject.toml").open("rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:
    __version__ = _source_version()
