"""Reading a TOML config file with one-sentence errors (device and verifier configs alike)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from core.errors import ConfigError


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
