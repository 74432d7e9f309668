"""Every error the device SDK raises, in one place. Catch `SpecSteerError` to catch them all.

    SpecSteerError                 core.errors: the root every package's errors hang from
    ├── ConfigError                bad parameters, unknown method or setting, empty prompt
    │   ├── AdapterError           a federated adapter folder that is missing, damaged or for another model
    │   ├── PinningError           a pin set or its anchors cannot be trusted as given; nothing sent
    │   └── PromptRefused          the prompt guard's `refuse` policy found a private span; nothing sent
    ├── ModelLoadError             a model path or name that cannot be loaded
    ├── ProfileError               a private-history file that cannot be read or parsed
    ├── ProtocolError              a verifier message that breaks the session contract
    │   └── ContractError          core.contract: a frame the one session contract refuses
    ├── VerifierLost               the verifier is unreachable or went away: a fault, not a breach
    ├── VerifierRefused            the verifier failed TLS or pinning (or refused ours): never a fallback
    └── WitnessRequired            require_witness: the cloud spoilt the witnessing or the quorum was missed

The device-only classes are defined next to the code that raises them (`sdk.pinning`,
`sdk.prompt_guard`, `sdk.transport`, `sdk.remote`, `sdk.audited`) and gathered here, so an app imports its
`except` clauses from `sdk` or `sdk.errors` without knowing the module layout.
"""

from __future__ import annotations

from specsteer.core.contract import ContractError
from specsteer.core.errors import AdapterError, ConfigError, ModelLoadError, ProfileError, ProtocolError, SpecSteerError
from specsteer.sdk.audited import WitnessRequired
from specsteer.sdk.pinning import PinningError
from specsteer.sdk.prompt_guard import PromptRefused
from specsteer.sdk.remote import VerifierRefused
from specsteer.sdk.transport import VerifierLost

__all__ = [
    "AdapterError",
    "ConfigError",
    "ContractError",
    "ModelLoadError",
    "PinningError",
    "ProfileError",
    "PromptRefused",
    "ProtocolError",
    "SpecSteerError",
    "VerifierLost",
    "VerifierRefused",
    "WitnessRequired",
]
