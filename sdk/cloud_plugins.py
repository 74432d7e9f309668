"""Where a device command needs cloud code in this process, it is found by entry point, never imported.

`sdk` never imports `server` or `federation` (docs/architecture.md): what an app embeds holds no
cloud code. One device command still wants the cloud beside it: `sdk generate` without `--server`
runs the verifier in this process. The cloud side registers it in its package metadata
(pyproject.toml):

    [project.entry-points."specsteer.local_verifier"]   in_process = "specsteer.server.local:in_process_verifier"

An install without the cloud code (or a broken one) gets one sentence naming the extra to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from specsteer.core.errors import ConfigError

if TYPE_CHECKING:  # annotations only: the `sdk` CLI reads the plugins before any model is needed
    from specsteer.core.models import CausalLM
    from specsteer.sdk.transport import InProcessVerifier

__all__ = [
    "CLOUD_EXTRA_HINT",
    "LOCAL_VERIFIER_GROUP",
    "LocalVerifierFactory",
    "local_verifier_factory",
]

LOCAL_VERIFIER_GROUP = "specsteer.local_verifier"
CLOUD_EXTRA_HINT = "pip install 'specsteer-sdk[cloud]'"

# `importlib.metadata.entry_points(group=...)` by default; injectable so tests can stand in for the metadata.
Lookup = Callable[..., Iterable[EntryPoint]]


class LocalVerifierFactory(Protocol):
    """Builds the cloud verifier in this process; what `server.local.in_process_verifier` is."""

    def __call__(
        self, specialist_lm: CausalLM, generalist_lm: CausalLM, *, seed: int, federation_state: Path | None
    ) -> InProcessVerifier: ...


def _load(group: str, needs: str, lookup: Lookup | None) -> object:
    chosen = sorted((lookup or entry_points)(group=group), key=lambda ep: ep.name)
    if not chosen:
        raise ConfigError(f"{needs} needs the cloud extra: {CLOUD_EXTRA_HINT}")
    try:
        return chosen[0].load()
    except Exception as exc:  # an import error anywhere in the cloud code, not only ImportError
        raise ConfigError(
            f"{needs} needs the cloud extra: {CLOUD_EXTRA_HINT} ({chosen[0].value} did not load: {exc})"
        ) from None


def local_verifier_factory(lookup: Lookup | None = None) -> LocalVerifierFactory:
    """The registered factory of the in-process verifier, or `ConfigError` naming the cloud extra."""
    factory = _load(LOCAL_VERIFIER_GROUP, "the in-process verifier", lookup)
    if not callable(factory):
        raise ConfigError(f"the in-process verifier needs the cloud extra: {CLOUD_EXTRA_HINT}")
    return factory
