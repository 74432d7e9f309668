"""The SDK's version: the distribution's (`core.version` reads it, so every CLI shares it)."""

from __future__ import annotations

from specsteer.core.version import DISTRIBUTION, __version__, _source_version

__all__ = ["DISTRIBUTION", "__version__", "_source_version"]
