"""The device SDK's public API: what `sdk` exports is a deliberate list (as httpx guards its own).

An app writes `from sdk import SpecSteerClient, ClientConfig, ...`; a name that silently appears
or disappears from `sdk` breaks apps or commits us to an accident, so the list is spelled out here.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from dataclasses import fields
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

import specsteer.sdk as sdk
from specsteer.core.errors import SpecSteerError
from specsteer.core.session_types import SessionParams
from specsteer.sdk import _version
from specsteer.sdk.client import GenerationSettings, SpecSteerClient
from specsteer.sdk.decoding import DecodeOptions

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = [
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
ERRORS = [
    "ConfigError",
    "ModelLoadError",
    "PinningError",
    "ProfileError",
    "ProtocolError",
    "SpecSteerError",
    "VerifierLost",
    "VerifierRefused",
]


def test_all_is_the_public_api_sorted() -> None:
    assert sdk.__all__ == PUBLIC
    assert sdk.__all__ == sorted(sdk.__all__)


def test_every_public_name_in_the_package_is_exported() -> None:
    # Submodules become attributes once imported; everything else not underscored must be in __all__.
    # dir() lists the names `sdk` imports on first use too (its `__dir__`), and getattr loads them.
    public = [
        name
        for name in dir(sdk)
        if (not name.startswith("_") or name == "__version__") and not isinstance(getattr(sdk, name), types.ModuleType)
    ]
    assert public == PUBLIC


def test_every_lazily_imported_name_is_the_defining_modules_own() -> None:
    from specsteer.core import models
    from specsteer.sdk import client, context, decoding, llamacpp

    for name in PUBLIC:
        exported = getattr(sdk, name)
        for module in (models, client, context, decoding, llamacpp):
            if name in vars(module):
                assert exported is vars(module)[name], name
    with pytest.raises(AttributeError, match="no attribute 'NotAName'"):
        _ = sdk.NotAName  # type: ignore[attr-defined]


def test_the_names_an_app_needs_are_there() -> None:
    for name in ("SpecSteerClient", "ClientConfig", "Profile", "SessionParams", "DecodeOptions", "Generation"):
        assert hasattr(sdk, name), name
    for name in ERRORS:
        error = getattr(sdk, name)
        assert issubclass(error, SpecSteerError), f"{name} must be under SpecSteerError so one except catches all"
        assert getattr(sdk.errors, name) is error


def test_version_comes_from_the_package_metadata_or_the_source_tree() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    try:
        installed = version("specsteer-sdk")
    except PackageNotFoundError:
        installed = project["version"]
    assert sdk.__version__ == installed
    assert re.fullmatch(r"\d+(\.\d+)*.*", sdk.__version__)
    # A checkout that was never installed reads pyproject.toml.
    assert _version._source_version() == project["version"]


def test_generation_settings_are_exactly_the_overridable_fields() -> None:
    declared = set(GenerationSettings.__annotations__)
    assert declared == {f.name for f in fields(SessionParams)} | {f.name for f in fields(DecodeOptions)}


def test_generate_and_stream_overrides_are_typed() -> None:
    for method in (SpecSteerClient.generate, SpecSteerClient.stream):
        hints = typing.get_type_hints(method)
        assert hints["overrides"] == typing.Unpack[GenerationSettings], method.__name__


def test_typing_markers_ship() -> None:
    # PEP 561: one marker at the import root types every package under it.
    assert (ROOT / "specsteer" / "py.typed").is_file()
