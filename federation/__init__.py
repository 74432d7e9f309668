"""Federated LoRA tuning of per-device Specialists (Flower + Opacus + peft).

See docs/federation.md. Importing the package makes Flower and Hugging Face strictly offline
before either is imported: no telemetry, no update checks, no runtime dependency installation,
no model hub. Explicit settings in the environment win.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

for _key, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_key, _value)
