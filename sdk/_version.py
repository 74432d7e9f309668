"""The installed distribution's version, or the source tree's when the SDK runs from a checkout."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
