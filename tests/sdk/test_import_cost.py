"""Importing the SDK, its errors and its CLI's parser loads neither torch nor transformers.

Those two cost seconds and hundreds of MB (`import sdk` took 4.8 s and `sdk --help` 400 MB when
they came along); only running a model needs them. Each check runs in a fresh interpreter, since
this test process has long imported both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers")


def heavy_modules_after(code: str) -> list[str]:
    """Which of `HEAVY` a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    [
        "sdk",
        "specsteer.sdk.errors",
        "specsteer.sdk.cli",
        "specsteer.core.errors",
        "specsteer.core.session_types",
        "specsteer.core.cli",
        "specsteer.core.limits",
        "specsteer.core.pins",
        "specsteer.core.wire",
        "specsteer.core.contract",
    ],
)
def test_importing_loads_no_model_library(module: str) -> None:
    assert heavy_modules_after(f"import {module}") == []


@pytest.mark.parametrize(("argv", "shown"), [(["--help"], "generate"), (["generate", "--help"], "--max-new-tokens")])
def test_sdk_help_loads_no_model_library(argv: list[str], shown: str) -> None:
    code = (
        "import contextlib, io\n"
        "from specsteer.sdk.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        f"assert {shown!r} in out.getvalue(), out.getvalue()\n"
    )
    assert heavy_modules_after(code) == []


def test_a_public_name_that_needs_torch_still_imports_from_sdk() -> None:
    # The lazily imported names load their module on first use, and only then.
    assert heavy_modules_after("from specsteer.sdk import SpecSteerError, SessionParams") == []
    assert heavy_modules_after("from specsteer.sdk import load_causal_lm") == list(HEAVY)
    # The device's own loop and its torch-free model facts need neither.
    assert (
        heavy_modules_after("from specsteer.sdk import Specialist, load_device_lm, OnnxDrafter, SpecSteerClient") == []
    )
