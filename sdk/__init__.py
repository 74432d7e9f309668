"""SpecSteer device SDK: the on-device Specialist and the Draft-Verify-Recover loop.

What an app embeds, importable from `specsteer.sdk` itself (the submodules are the implementation):

    from specsteer.sdk import ClientConfig, Profile, SpecSteerClient

    config = ClientConfig.from_file("device.toml")  # [verifier] pins, certificates; [device]; [audit]
    with SpecSteerClient.from_config(config, profile=Profile.from_file("profile.json")) as client:
        print(client.generate("Write the commit body for: retry a flaky fetch once", max_new_tokens=64).text)

`__all__` below is the public API; tests/sdk/test_public_api.py guards it (and tests/sdk/test_readme.py
runs the README's copy of these lines against a real verifier on loopback, then `audit verify`).

The names whose modules import a model library load on first use (PEP 562), so `import
specsteer.sdk`, `specsteer.sdk.errors` and `sdk --help` do not pay for a model until one runs. A
device that drafts from a model bundle (`sdk models build`, `load_bundle`, `load_specialist`) never
imports torch at all; only `CausalLM`, `load_causal_lm` and the torch drafter load torch and
transformers (the `[convert]` extra).


The other modules:

- `sdk._version`: The SDK's version: the distribution's (`core.version` reads it, so every CLI shares it).
- `sdk.audited`: The device's audit log, opened for a client: every uplink's bytes recorded before they are
  sent.
- `sdk.bundles`: Model bundles for the device: built once where torch is (`sdk models build`), loaded without
  it.
- `sdk.cli`: `sdk`: run SpecSteer and its baselines from the command line.
- `sdk.client`: The Python API an app embeds: open a client once, generate many times, stream text as it
  commits.
- `sdk.cloud_plugins`: Where a device command needs cloud code in this process, it is found by entry point,
  never imported.
- `sdk.connect_faults`: Why a connection to the verifier failed: a failed check (refuse) or a dead verifier
  (fall back).
- `sdk.context`: The user's private history on the device: loading it, retrieving from it, and fitting it into
  the Specialist's context.
- `sdk.decoding`: The device side: the Specialist with the user's private context drafts and recovers.
- `sdk.drafters`: The backends a device's Specialist can run its forwards on, by name (`sdk generate
  --drafter`).
- `sdk.egress`: The egress choke point: every byte the SDK sends to the verifier passes through here first.
- `sdk.llamacpp`: The Specialist's forwards on llama.cpp: the same GGUF, about 3x cheaper steps on a CPU.
- `sdk.models_command`: `sdk models`: model bundles, built once on a build machine and shipped with an app.
- `sdk.onnx_drafter`: The Specialist's forwards on onnxruntime-genai: prebuilt wheels, an int4 model, about 4x
  cheaper steps.
- `sdk.pinning`: The device's pin set: which TLS anchors it trusts for the verifier, and nothing else.
- `sdk.prompt_guard`: The prompt, guarded: what of the user's prompt goes up in the Open (the device side
  of `privacy.guard`).
- `sdk.remote`: The network transport: a `Verifier` over one TLS-pinned, mutually authenticated gRPC channel.
- `sdk.serving_chain`: The verifier's certificate chain checked as an X.509 path under the pinned anchors.
- `sdk.specialists`: The device's Specialist from its settings: which model, on which drafter, with which
  adapters.
- `sdk.tls_probe`: One probe TLS connection to the verifier, beside gRPC's: what the device learns before it
  sends.
- `sdk.transport`: The narrow interface between the device and a verifier, and the in-process transport.
- `sdk.uplink_guard`: Where the egress guard decides what of a round goes up (the device side of
  `privacy.guard`).
"""

import importlib
import typing

from specsteer.core.session_types import CandidatePolicy, GenerationStats, Method, SessionParams
from specsteer.sdk._version import __version__
from specsteer.sdk.errors import (
    ConfigError,
    ModelLoadError,
    PinningError,
    ProfileError,
    ProtocolError,
    SpecSteerError,
    VerifierLost,
    VerifierRefused,
)

if typing.TYPE_CHECKING:  # what a type checker sees; at run time `__getattr__` imports these on first use
    from specsteer.core.device_lm import DeviceLM, load_device_lm
    from specsteer.core.models import CausalLM, load_causal_lm
    from specsteer.sdk.bundles import build_bundle, load_bundle
    from specsteer.sdk.client import ClientConfig, GenerationSettings, GenerationStream, SpecSteerClient
    from specsteer.sdk.context import Profile, demo_profile_path
    from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist
    from specsteer.sdk.llamacpp import LlamaCppDrafter
    from specsteer.sdk.onnx_drafter import OnnxDrafter
    from specsteer.sdk.specialists import load_specialist

__all__ = [
    "CandidatePolicy",
    "CausalLM",
    "ClientConfig",
    "ConfigError",
    "DecodeOptions",
    "DeviceLM",
    "Generation",
    "GenerationSettings",
    "GenerationStats",
    "GenerationStream",
    "LlamaCppDrafter",
    "Method",
    "ModelLoadError",
    "OnnxDrafter",
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
    "build_bundle",
    "demo_profile_path",
    "load_bundle",
    "load_causal_lm",
    "load_device_lm",
    "load_specialist",
]

# Public name -> the module that defines it, for the names imported on first use.
_LAZY = {
    "CausalLM": "specsteer.core.models",
    "load_causal_lm": "specsteer.core.models",
    "DeviceLM": "specsteer.core.device_lm",
    "load_device_lm": "specsteer.core.device_lm",
    "OnnxDrafter": "specsteer.sdk.onnx_drafter",
    "ClientConfig": "specsteer.sdk.client",
    "GenerationSettings": "specsteer.sdk.client",
    "GenerationStream": "specsteer.sdk.client",
    "SpecSteerClient": "specsteer.sdk.client",
    "Profile": "specsteer.sdk.context",
    "DecodeOptions": "specsteer.sdk.decoding",
    "Generation": "specsteer.sdk.decoding",
    "Specialist": "specsteer.sdk.decoding",
    "LlamaCppDrafter": "specsteer.sdk.llamacpp",
    "demo_profile_path": "specsteer.sdk.context",
    "build_bundle": "specsteer.sdk.bundles",
    "load_bundle": "specsteer.sdk.bundles",
    "load_specialist": "specsteer.sdk.specialists",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
