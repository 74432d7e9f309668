"""The base install is the device SDK alone; the cloud, Flower and Opacus come only with extras.

An app team installs `specsteer-sdk` to embed `SpecSteerClient`; it must not get Flower's server
stack (fastapi, sqlalchemy, uvicorn), Opacus or the cloud's metrics. And what the device packages
import must be in the base dependencies, or `import sdk` fails in such an install. Imports are
read from the source (module level and inside functions alike), as tests/test_architecture.py does.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from collections.abc import Callable
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from specsteer.core.errors import SpecSteerError
from tests.source_imports import imported_names

ROOT = Path(__file__).resolve().parents[1]
OURS = {"core", "sdk", "server", "audit", "privacy", "federation", "demo", "bench", "tests", "tools"}
DEVICE = ("core", "sdk", "audit", "privacy")  # what an app embeds (docs/architecture.md)
CLOUD_ONLY = {"flwr", "opacus", "fastapi", "sqlalchemy", "uvicorn", "starlette", "alembic", "prometheus-client"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement such as "sqlalchemy[asyncio]==2.1.9"."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _third_party_imports(package: str) -> dict[str, set[str]]:
    """Top-level third-party module names `package` imports, with the files that import them."""
    found: dict[str, set[str]] = {}
    for name, where in imported_names(package):
        top = name.split(".")[0]
        if top not in OURS and top not in sys.stdlib_module_names and top != "__future__":
            # `google` is a namespace shared by several distributions; protobuf owns google.protobuf.
            key = "google.protobuf" if name.startswith("google.protobuf") else top
            found.setdefault(key, set()).add(where)
    return found


def test_the_base_install_has_no_cloud_flower_or_opacus() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    assert not base & CLOUD_ONLY, f"the base install pulls {sorted(base & CLOUD_ONLY)}; they belong in an extra"


# Optional features of the device packages that need an extra, imported only inside the function
# that needs them and failing there with a sentence naming the extra (module, file) -> extra.
OPTIONAL = {
    ("opacus", "privacy/ledger.py"): "federation",
    ("llama_cpp", "sdk/llamacpp.py"): "llamacpp",
    ("onnxruntime_genai", "sdk/onnx_drafter.py"): "onnx",
}


def test_the_device_packages_import_only_base_dependencies() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    owners = packages_distributions()
    missing: dict[str, list[str]] = {}
    for package in DEVICE:
        for module, found in _third_party_imports(package).items():
            where = {path for path in found if (module, path) not in OPTIONAL}
            if not where:
                continue
            dists = {_name(d) for d in owners.get(module.split(".")[0], [module])}
            if module == "google.protobuf":
                dists = {"protobuf"}
            if not dists & base:
                missing[module] = sorted(where)
    assert not missing, f"the device packages import modules outside the base dependencies: {missing}"


def test_each_extra_is_there_and_the_test_extra_takes_them_all() -> None:
    extras = _project()["optional-dependencies"]
    assert {"cloud", "federation", "bench", "test"} <= set(extras)
    test = " ".join(extras["test"])
    for extra in ("cloud", "federation", "bench"):
        assert extra in test, f"[test] runs the whole suite, so it needs [{extra}]"
    assert "mypy" in {_name(r) for r in extras["test"]}


def test_typing_markers_ship_with_the_packages() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    # PEP 561: the marker of the one import root covers every package under it.
    assert (ROOT / "specsteer" / "py.typed").is_file(), "specsteer/py.typed is missing"
    assert "py.typed" in data["specsteer"], "py.typed of specsteer is not in package-data"


def test_optional_features_import_their_extra_lazily() -> None:
    for module, path in OPTIONAL:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        top_level = {
            alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names
        } | {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
        assert module not in top_level, f"{path} imports {module} at module level: the base install would break"


def _use_opacus() -> None:
    from specsteer.privacy.ledger import _epsilon_cached, epsilon_of

    _epsilon_cached.cache_clear()  # an earlier test's answer would skip the import
    epsilon_of([(1.0, 0.01, 1)], 1e-5)


def _use_llama_cpp() -> None:
    from specsteer.sdk.llamacpp import check_drafter_installed

    check_drafter_installed("llamacpp")


def _use_onnx() -> None:
    from specsteer.sdk.drafters import check_drafter_installed

    check_drafter_installed("onnx")


@pytest.mark.parametrize(
    ("module", "use"), [("opacus", _use_opacus), ("llama_cpp", _use_llama_cpp), ("onnxruntime_genai", _use_onnx)]
)
def test_a_feature_without_its_extra_names_the_extra_to_install(
    module: str, use: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = next(e for (m, _), e in OPTIONAL.items() if m == module)
    # As in a base install: the module cannot be imported or found.
    monkeypatch.setitem(sys.modules, module, None)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real_find_spec(name, *a)
    )
    with pytest.raises(SpecSteerError, match=re.escape(f"pip install 'specsteer-sdk[{extra}]'")):
        use()
