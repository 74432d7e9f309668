"""SpecSteer: edge-cloud personalized text generation, the device SDK and the cloud verifier.

One import root for everything the distribution `specsteer-sdk` installs:

- `specsteer.sdk`: the device SDK an app embeds (the Specialist, the Draft-Verify-Recover loop,
  the pinned mutual-TLS client, the egress guard's wiring); its `__all__` is the public API;
- `specsteer.core`: what the device and the cloud share (the wire contract, the algorithm's pure
  rules, model loading, limits, errors);
- `specsteer.audit`: the signed, tamper-evident log of what crossed the wire and `audit verify`;
- `specsteer.privacy`: the egress guard's detectors, the leakage report, DP accounting, vaults;
- `specsteer.server`: the cloud verifier (the `[cloud]` extra);
- `specsteer.federation`: Flower + Opacus LoRA rounds (the `[federation]` extra).

In the repository each lives in its own top-level folder (`sdk/`, `core/`, ...); `specsteer/`
links to them (docs/architecture.md).
"""
