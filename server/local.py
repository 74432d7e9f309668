"""The cloud verifier in the device's process: what `sdk generate` without `--server` runs against.

Registered as the `specsteer.local_verifier` entry point (pyproject.toml), which the `sdk` CLI
looks up: device code never imports the server (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

from specsteer.core.models import CausalLM
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.grpc_server import GlobalAdapters
from specsteer.server.session import CloudVerifier

__all__ = ["in_process_verifier"]


def in_process_verifier(
    specialist_lm: CausalLM, generalist_lm: CausalLM, *, seed: int, federation_state: Path | None = None
) -> InProcessVerifier:
    """A `CloudVerifier` reached through the wire format, sharing the device's Specialist weights.

    The cloud's generic Specialist copy has the same base weights: in one process they are shared
    (and so are the global adapters: the device's copies of the federated versions).
    """
    adapters = None if federation_state is None else GlobalAdapters(specialist_lm, Path(federation_state) / "global")
    cloud = CloudVerifier(generalist_lm, specialist_lm, seed=seed, global_adapters=adapters)
    return InProcessVerifier(cloud.open, vocab_size=specialist_lm.vocab_size)
