"""The backends a device's Specialist can run its forwards on, by name (`sdk generate --drafter`).

Apart from `sdk.llamacpp`, which imports torch, so the CLI builds its options without it.
"""

from __future__ import annotations

__all__ = ["DRAFTERS"]

DRAFTERS = ("torch", "llamacpp")
"""Where the device's Specialist runs its forwards: torch (the loaded model; the default) or llama.cpp."""
