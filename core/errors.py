"""The SDK's error tree. Every failure a user can cause is one of these, with a readable message.

    SpecSteerError
    ├── ConfigError        bad parameters, unknown method, empty prompt
    ├── ModelLoadError     a model path or name that cannot be loaded
    ├── ProfileError       a private-history file that cannot be read or parsed
    └── ProtocolError      a verifier or device message that breaks the session contract

CLIs catch only `SpecSteerError`, print its message as one sentence and exit non-zero.
"""

from __future__ import annotations


class SpecSteerError(Exception):
    """Base of every error the SDK raises on purpose."""


class ConfigError(SpecSteerError):
    """A parameter or option is missing, unknown or out of range."""


class AdapterError(ConfigError):
    """An adapter folder is missing, damaged, of the wrong version, or built for another base model."""


class ModelLoadError(SpecSteerError):
    """A model folder, GGUF file or embedded model name cannot be loaded."""


class ProfileError(SpecSteerError):
    """A profile (private history) file is missing or malformed."""


class ProtocolError(SpecSteerError):
    """A message broke the Draft-Verify-Recover session contract."""


def one_line(exc: BaseException) -> str:
    """`exc`'s message as one sentence without its final period, at most 300 characters.

    Library messages (transformers') span lines and paragraphs; the CLIs print one sentence.
    """
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.rstrip(".")
    return text if len(text) <= 300 else text[:297] + "..."
