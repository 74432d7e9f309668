"""One error tree per package, rooted at `core.errors.SpecSteerError`, found in one place.

`audit`, `privacy`, `server` and `federation` define every error in their `errors` module (which
also gathers the lower layers' errors they raise); the device SDK gathers its errors in `sdk.errors`
(which `sdk` re-exports). A CLI catches `SpecSteerError` alone, so an error class outside the tree
would escape as a traceback.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

from specsteer.core.errors import SpecSteerError


def _modules(package: str) -> list[ModuleType]:
    """`specsteer.<package>` and every module under it (through the one import root: a bare
    `core` from the repository's root would be a second copy of every class)."""
    name = f"specsteer.{package}"
    root = importlib.import_module(name)
    return [root] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(root.__path__, name + ".")]


def _public_errors(package: str) -> dict[str, type[BaseException]]:
    """Every public exception class defined (not just imported) in `package`."""
    found: dict[str, type[BaseException]] = {}
    for module in _modules(package):
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


@pytest.mark.parametrize("package", ["audit", "privacy", "server", "federation"])
def test_every_error_is_defined_in_the_package_errors_module(package: str) -> None:
    errors = _public_errors(package)
    assert errors, package
    elsewhere = sorted(name for name, cls in errors.items() if cls.__module__ != f"specsteer.{package}.errors")
    assert not elsewhere, f"define these in {package}/errors.py: {elsewhere}"


@pytest.mark.parametrize("package", ["core", "audit", "privacy", "sdk", "server", "federation"])
def test_every_error_is_under_the_root(package: str) -> None:
    outside = sorted(name for name, cls in _public_errors(package).items() if not issubclass(cls, SpecSteerError))
    assert not outside, f"not under SpecSteerError: {outside}"


def test_sdk_errors_gathers_every_device_error() -> None:
    errors = importlib.import_module("specsteer.sdk.errors")
    gathered = {getattr(errors, name) for name in errors.__all__}
    missing = sorted(name for name, cls in _public_errors("sdk").items() if cls not in gathered)
    assert not missing, f"add to sdk/errors.py: {missing}"
    assert set(_public_errors("core").values()) <= gathered


@pytest.mark.parametrize(
    ("package", "moved"),
    [
        ("server", {"specsteer.server.pki": ["PkiError"]}),
        (
            "federation",
            {
                "specsteer.federation.budget_ledger": ["BudgetExhausted"],
                "specsteer.federation.participant": ["NotEligible", "PolicyRefusal"],
            },
        ),
    ],
)
def test_the_errors_module_is_where_the_old_imports_lead(package: str, moved: dict[str, list[str]]) -> None:
    """Errors gathered into `<package>.errors` are still exported where they were defined before."""
    errors = importlib.import_module(f"specsteer.{package}.errors")
    for module, names in moved.items():
        for name in names:
            assert getattr(importlib.import_module(module), name) is getattr(errors, name)
    defined = {cls for cls in _public_errors(package).values()}
    assert defined <= {getattr(errors, name) for name in errors.__all__}
