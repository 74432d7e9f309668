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
import subprocess
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
    ("opacus", "privacy/accounting.py"): "federation",
    ("llama_cpp", "sdk/llamacpp.py"): "llamacpp",
}
# What converts models (and runs them on torch): the `[convert]` extra. The device packages import
# it only in the modules of that path, never on the default one (onnxruntime-genai on a bundle),
# which test_the_default_device_path_runs_without_the_converter runs with these modules refused.
CONVERTER_MODULES = {"torch", "transformers", "peft", "safetensors", "gguf", "onnx", "onnx_ir", "onnxruntime"}


def test_the_device_packages_import_only_base_dependencies() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    convert = {_name(r) for r in _project()["optional-dependencies"]["convert"]}
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
            allowed = base | (convert if module.split(".")[0] in CONVERTER_MODULES else set())
            if not dists & allowed:
                missing[module] = sorted(where)
    assert not missing, f"the device packages import modules outside the base dependencies: {missing}"


def test_the_base_install_has_no_torch_transformers_or_peft() -> None:
    base = {_name(r) for r in _project()["dependencies"]}
    assert not base & {"torch", "transformers", "peft", "safetensors", "gguf"}, sorted(base)
    assert "onnxruntime-genai" in base, "the default drafter's runtime is part of the device install"


def test_the_default_device_path_runs_without_the_converter() -> None:
    """The device SDK, its CLI's parser and the audit log import with torch and the converter refused."""
    script = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {sorted(CONVERTER_MODULES)!r}:\n"
        "            raise ImportError(name + ' is not installed on a device')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import specsteer.sdk, specsteer.sdk.client, specsteer.sdk.remote, specsteer.sdk.bundles\n"
        "import specsteer.sdk.cli, specsteer.audit.log, specsteer.audit.verify, specsteer.privacy.guard\n"
        "from specsteer.sdk import ClientConfig, Profile, SpecSteerClient\n"
        "specsteer.sdk.cli.build_parser()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_constraints_pin_every_requirement_inside_its_range() -> None:
    """`make install` and CI install pyproject's ranges under constraints.txt's exact versions."""
    from packaging.requirements import Requirement

    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[_name(name)] = version
    project = _project()
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    for text in requirements:
        requirement = Requirement(text)
        name = _name(requirement.name)
        if name in ("specsteer-sdk", "llama-cpp-python"):  # ourselves; the opt-in compiler extra
            continue
        assert name in pins, f"constraints.txt does not pin {name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {text}"


def test_pip_check_is_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_extra_is_there_and_the_test_extra_takes_them_all() -> None:
    extras = _project()["optional-dependencies"]
    assert {"convert", "cloud", "federation", "bench", "test"} <= set(extras)
    test = " ".join(extras["test"])
    for extra in ("convert", "cloud", "federation", "bench"):
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
    from specsteer.privacy.accounting import _epsilon_cached, epsilon_of

    _epsilon_cached.cache_clear()  # an earlier test's answer would skip the import
    epsilon_of([(1.0, 0.01, 1)], 1e-5)


def _use_llama_cpp() -> None:
    from specsteer.sdk.llamacpp import check_drafter_installed

    check_drafter_installed("llamacpp")


@pytest.mark.parametrize(("module", "use"), [("opacus", _use_opacus), ("llama_cpp", _use_llama_cpp)])
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


def test_converting_without_the_converter_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from specsteer.core import onnx_cache

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        onnx_cache.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    onnx_cache.check_onnx_runtime()  # the device's runtime is there: only conversion needs the extra
    with pytest.raises(SpecSteerError, match=re.escape("pip install 'specsteer-sdk[convert]'")):
        onnx_cache.check_onnx_builder()


@pytest.mark.slow
def test_the_wheel_holds_one_package_and_its_device_install_pulls_no_torch(tmp_path: Path) -> None:
    """What an app team gets: one top-level package, and a `pip install` of the wheel that resolves
    (pip's own report) to no torch, transformers or peft."""
    import json
    import zipfile

    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", tmp_path, ROOT],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("specsteer_sdk-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"specsteer"}, tops
    report = tmp_path / "report.json"
    resolved = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--report",
            report,
            wheel,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    names = {_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert "onnxruntime-genai" in names and "grpcio" in names
    assert not names & {"torch", "transformers", "peft", "safetensors", "flwr", "opacus"}, sorted(names)
