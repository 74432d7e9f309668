"""core.model_registry and core.gguf_cache: what only needs model names or GGUF paths loads no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_model_names_and_gguf_paths_import_neither_torch_nor_transformers() -> None:
    # A fresh interpreter: this one has long imported torch for other tests.
    code = (
        "import sys\n"
        "from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, EMBEDDED_MODELS\n"
        "from specsteer.core.gguf_cache import locate_embedded_gguf\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
