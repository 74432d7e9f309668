"""Where a device command needs cloud code in this process, it is found by entry point, never imported.

`sdk` never imports `server` or `federation` (docs/architecture.md): what an app embeds holds no
cloud code. Two device commands still want the cloud beside them: `sdk generate` without
`--server` runs the verifier in this process, and `sdk demo` starts a verifier and audits its own
log. The cloud side registers both in its package metadata (pyproject.toml):

    [project.entry-points."specsteer.local_verifier"]   in_process = "specsteer.server.local:in_process_verifier"
    [project.entry-points."specsteer.sdk_commands"]     demo = "demo.cli:main"

An install without the cloud code (or a broken one) gets one sentence naming the extra to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
    "SDK_COMMANDS_GROUP",
    "LocalVerifierFactory",
    "local_verifier_factory",
    "sdk_command",
]

LOCAL_VERIFIER_GROUP = "specsteer.local_verifier"
SDK_COMMANDS_GROUP = "specsteer.sdk_commands"
CLOUD_EXTRA_HINT = "pip install 'specsteer-sdk[cloud]'"

# `importlib.metadata.entry_points(group=...)` by default; injectable so tests can stand in for the metadata.
Lookup = Callable[..., Iterable[EntryPoint]]


class LocalVerifierFactory(Protocol):
    """Builds the cloud verifier in this process; what `server.local.in_process_verifier` is."""

    def __call__(
        self, specialist_lm: CausalLM, generalist_lm: CausalLM, *, seed: int, federation_state: Path | None
    ) -> InProcessVerifier: ...


def _load(group: str, name: str | None, needs: str, lookup: Lookup | None) -> object:
    found = sorted((lookup or entry_points)(group=group), key=lambda ep: ep.name)
    chosen = [ep for ep in found if name is None or ep.name == name]
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
    factory = _load(LOCAL_VERIFIER_GROUP, None, "the in-process verifier", lookup)
    if not callable(factory):
        raise ConfigError(f"the in-process verifier needs the cloud extra: {CLOUD_EXTRA_HINT}")
    return factory


def sdk_command(name: str, lookup: Lookup | None = None) -> Callable[[Sequence[str]], int]:
    """The registered `sdk NAME` command (`main(argv) -> exit code`), or `ConfigError` naming the extra."""
    command = _load(SDK_COMMANDS_GROUP, name, f"sdk {name}", lookup)
    if not callable(command):
        raise ConfigError(f"sdk {name} needs the cloud extra: {CLOUD_EXTRA_HINT}")
    return command
