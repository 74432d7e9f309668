"""SpecSteer device SDK: the on-device Specialist and the Draft-Verify-Recover loop.

What an app embeds, importable from `sdk` itself (the submodules are the implementation):

    from sdk import ClientConfig, Profile, SpecSteerClient, load_causal_lm

    config = ClientConfig.from_file("device.toml")  # [verifier] server, pins, cert, key
    specialist = load_causal_lm("qwen2.5-coder-0.5b-instruct")  # the on-device model (the embedded default)
    with SpecSteerClient.connect(specialist, config, profile=Profile.from_file("profile.json")) as client:
        print(client.generate("Write the commit body for: retry a flaky fetch once", max_new_tokens=64).text)

`__all__` below is the public API; tests/sdk/test_public_api.py guards it (and tests/sdk/test_readme.py
runs the README's copy of these lines against a real verifier on loopback).
"""

from core.models import CausalLM, load_causal_lm
from core.session_types import CandidatePolicy, GenerationStats, Method, SessionParams
from sdk._version import __version__
from sdk.client import ClientConfig, GenerationSettings, GenerationStream, SpecSteerClient
from sdk.context import Profile
from sdk.device import DecodeOptions, Generation, Specialist
from sdk.errors import (
    ConfigError,
    ModelLoadError,
    PinningError,
    ProfileError,
    ProtocolError,
    SpecSteerError,
    VerifierLost,
    VerifierRefused,
)
from sdk.llamacpp import LlamaCppDrafter

__all__ = [
    "CandidatePolicy",
    "CausalLM",
    "ClientConfig",
    "ConfigError",
    "DecodeOptions",
    "Generation",
    "GenerationSettings",
    "GenerationStats",
    "GenerationStream",
    "LlamaCppDrafter",
    "Method",
    "ModelLoadError",
    "PinningError",
    "Profile",
    "ProfileError",
    "ProtocolError",
    "SessionParams",
    "SpecSteerClient",
    "SpecSteerError",
    "Specialist",
    "VerifierLost",
    "VerifierRefused",
    "__version__",
    "load_causal_lm",
]
