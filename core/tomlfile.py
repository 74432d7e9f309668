"""Reading a TOML config file into a dataclass, with one-sentence errors (device and verifier configs alike).

`load_dataclass` is the one loader: each section's keys map to fields of the dataclass, whose
annotations say what a value must be; unknown sections and keys are errors (a typo must not fall
back to a default silently), and so are wrong types and missing required fields. Every message
names the file, the section and the key: `config file F: [section] key must be an integer; got "1"`.
A field's `metadata={"toml": "a number of seconds"}` words what its value must be.
"""

from __future__ import annotations

import math
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from specsteer.core.errors import ConfigError

__all__ = ["load_dataclass", "read_toml"]

T = TypeVar("T")


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; a missing, unreadable or invalid file is a `ConfigError` naming it."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def load_dataclass(
    cls: type[T],
    path: str | Path | None,
    layout: Mapping[str, Mapping[str, str]],
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """`cls` from the TOML file `path` (if given), then `overrides`, then its own checks.

    `layout` maps each section to {key in the file: field of `cls`}. Relative paths in the file are
    relative to its folder. `overrides` (field -> value) win where not None: a program's own values
    (command-line flags), checked by `cls` itself, not here.
    """
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        data = read_toml(path)
        base = path.resolve().parent
        for section, table in data.items():
            if section not in layout:
                raise ConfigError(f"config file {path}: unknown section [{section}]")
            if not isinstance(table, dict):
                raise ConfigError(f"config file {path}: [{section}] must be a table")
            for key, value in table.items():
                if key not in layout[section]:
                    raise ConfigError(f"config file {path}: unknown key {key!r} in [{section}]")
                name = layout[section][key]
                values[name] = _converted(cls, name, value, base, f"config file {path}: [{section}] {key}")
    known = _fields(cls)
    for name, value in (overrides or {}).items():
        if name not in known:
            raise ConfigError(f"unknown setting {name!r}")
        if value is not None:
            values[name] = value
    missing = [name for name, f in known.items() if _required(f) and name not in values]
    if missing:
        keys = [_key_of(layout, name) for name in missing]
        where = f"config file {path}" if path is not None else "the config"
        raise ConfigError(f"{where} needs {', '.join(keys)}")
    return cls(**values)


def _key_of(layout: Mapping[str, Mapping[str, str]], name: str) -> str:
    for section, keys in layout.items():
        for key, field_name in keys.items():
            if field_name == name:
                return f"[{section}] {key}"
    return name


def _required(f: Field[Any]) -> bool:
    return f.init and f.default is MISSING and f.default_factory is MISSING


def _fields(cls: type) -> dict[str, Field[Any]]:
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    return {f.name: f for f in fields(cls)}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _converted(cls: type, name: str, value: Any, base: Path, where: str) -> Any:
    """`value` from the file as field `name` of `cls` holds it, or a `ConfigError` saying what it must be."""
    kind = _hints(cls)[name]
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        # `X | None`: a file cannot say None (TOML has no null); leaving the key out means it.
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    wanted = _fields(cls)[name].metadata.get("toml")
    if kind is Path:
        if isinstance(value, str) and value:
            path = Path(value).expanduser()
            return path if path.is_absolute() else base / path
        wanted = wanted or "a path (a non-empty string)"
    elif kind is str:
        if isinstance(value, str) and value:
            return value
        wanted = wanted or "a non-empty string"
    elif kind is bool:
        if isinstance(value, bool):
            return value
        wanted = wanted or "true or false"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        wanted = wanted or "an integer"
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{where} must be finite; got {value!r}")
            return float(value)
        wanted = wanted or "a number"
    elif typing.get_origin(kind) is tuple and typing.get_args(kind) == (str, ...):
        if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        wanted = wanted or "a list of strings"
    else:
        raise TypeError(f"{cls.__name__}.{name}: a config file cannot hold a {kind!r}")
    raise ConfigError(f"{where} must be {wanted}; got {value!r}")
