"""The profile file format: JSON, JSONL or a dataset user object, sealed or not, into entries.

The device (`sdk.context.Profile`) and `privacy seal` read the same files, so the format is parsed
here once. Every problem raises `ProfileError` with one sentence naming the file.

Accepted profile files:

* a JSON user object as in the dataset: ``{"user_id": ..., "profile": [...], "queries": [...]}``
  (``queries`` is ignored), or ``{"entries": [...]}``;
* a JSON list of entries;
* a ``.jsonl`` / ``.ndjson`` file with one entry per line (or a single line holding a user object).

Each entry is an object with a non-empty string ``subject`` and a string ``body``; ``time`` (string or
number) is optional, ``trailers`` and any unknown keys are ignored (the names and emails in
``trailers`` are returned apart, as identities, for the egress guard only). A body that ends in its
own trailer block (``git log --format=%B``: a last paragraph of ``Key: value`` lines, one at least
naming a person) loses it the same way (`privacy.canaries.split_trailers`).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specsteer.core.errors import ProfileError
from specsteer.privacy.canaries import identities_from_trailers, split_trailers
from specsteer.privacy.vault import (
    KeyProvider,
    ProfileVault,
    VaultError,
    environment_key_provider,
    is_vault,
)

__all__ = ["ProfileData", "ProfileEntry", "parse_profile_obj", "read_profile"]

_JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})

# What json.loads cannot turn into an int (Python's digit limit): one sentence, not its hint.
_HUGE_NUMBER = f"a number of more than {sys.get_int_max_str_digits():,} digits, which no field takes"


@dataclass(frozen=True)
class ProfileEntry:
    """One past piece of the user's writing (a commit: subject line and body).

    Trailers are deliberately not kept: they are names and emails, not style.
    `time` is kept as text; numeric dataset timestamps (Unix seconds) become their decimal string.
    """

    subject: str
    body: str
    time: str | None = None


@dataclass(frozen=True)
class ProfileData:
    """What a profile file holds: the user, the entries in file order, and the trailers' identities."""

    user_id: str | None
    entries: tuple[ProfileEntry, ...]
    # Names and emails from the entries' trailers ({string: kind}), for the egress guard only.
    identities: dict[str, str] = field(default_factory=dict)


def read_profile(path: str | Path, *, key_provider: KeyProvider | None = None) -> ProfileData:
    """Read and parse a profile file; a sealed one (`privacy seal`) is decrypted in memory only.

    The key comes from `key_provider`, or by default from `$SPECSTEER_VAULT_KEY` /
    `$SPECSTEER_VAULT_PASSPHRASE`; the plaintext is never written anywhere.
    """
    p = Path(path)
    source = str(p)
    if is_vault(p):
        try:
            raw = ProfileVault.open(p, key_provider or environment_key_provider("the profile is encrypted"))
        except VaultError as exc:
            raise ProfileError(f"Cannot read profile {source}: {exc}.") from None
        return _from_bytes(raw, source, jsonl=None)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ProfileError(f"Cannot read profile {source}: the file does not exist.") from None
    except IsADirectoryError:
        raise ProfileError(f"Cannot read profile {source}: it is a directory, not a file.") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ProfileError(f"Cannot read profile {source}: {reason}.") from None
    return _from_bytes(raw, source, jsonl=p.suffix.lower() in _JSONL_SUFFIXES)


def parse_profile_obj(obj: object, *, source: str = "<profile>") -> ProfileData:
    """Parse already-decoded JSON (a user object or a list of entries); `source` names it in errors."""
    user_id: str | None = None
    if isinstance(obj, dict):
        user_id = _parse_user_id(obj, source)
        key = "profile" if "profile" in obj else "entries" if "entries" in obj else None
        if key is None:
            raise ProfileError(f'Cannot read profile {source}: the JSON object has no "profile" or "entries" list.')
        items = obj[key]
        if not isinstance(items, list):
            raise ProfileError(
                f'Cannot read profile {source}: "{key}" must be a list of entries, not {_json_type(items)}.'
            )
        label = f"{key}[{{}}]"
    elif isinstance(obj, list):
        items = obj
        label = "entry [{}]"
    else:
        raise ProfileError(
            f'Cannot read profile {source}: expected a JSON object with a "profile" list or a JSON '
            f"list of entries, not {_json_type(obj)}."
        )
    entries = tuple(_parse_entry(item, source, label.format(i)) for i, item in enumerate(items))
    return ProfileData(user_id=user_id, entries=entries, identities=_identities(items))


def _from_bytes(raw: bytes, source: str, *, jsonl: bool | None) -> ProfileData:
    """Parse file bytes; `jsonl=None` (a sealed file has no telling suffix) tries JSON, then JSONL."""
    try:
        # utf-8-sig: editors on Windows often prepend a BOM, which is still valid UTF-8 text.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProfileError(
            f"Cannot read profile {source}: it is not UTF-8 text (invalid byte at offset {exc.start})."
        ) from None

    if not text.strip():
        raise ProfileError(f"Cannot read profile {source}: the file is empty.")

    if jsonl:
        return _from_jsonl(text, source)
    if jsonl is None:
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return _from_jsonl(text, source)
        except ValueError:  # a number past Python's digit limit for int()
            raise ProfileError(f"Cannot read profile {source}: it holds {_HUGE_NUMBER}.") from None
        return parse_profile_obj(obj, source=source)

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = ""
        if exc.msg == "Extra data":
            hint = " (a file with one JSON object per line must be named .jsonl)"
        raise ProfileError(
            f"Cannot read profile {source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}{hint}."
        ) from None
    except RecursionError:
        raise ProfileError(f"Cannot read profile {source}: the JSON nests too deeply.") from None
    except ValueError:  # a number past Python's digit limit for int()
        raise ProfileError(f"Cannot read profile {source}: it holds {_HUGE_NUMBER}.") from None
    return parse_profile_obj(obj, source=source)


def _from_jsonl(text: str, source: str) -> ProfileData:
    parsed: list[tuple[int, object]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ProfileError(
                f"Cannot read profile {source}: line {lineno} is not valid JSON (column {exc.colno}: {exc.msg})."
            ) from None
        except RecursionError:
            raise ProfileError(f"Cannot read profile {source}: line {lineno} nests JSON too deeply.") from None
        except ValueError:  # a number past Python's digit limit for int()
            raise ProfileError(f"Cannot read profile {source}: line {lineno} holds {_HUGE_NUMBER}.") from None

    # `head -1 dataset.jsonl > me.jsonl` is the obvious way to pull one user out of the dataset,
    # so a single user-object line is accepted; several would make the choice of user ambiguous.
    first = parsed[0][1]
    if len(parsed) == 1 and isinstance(first, dict) and "profile" in first:
        return parse_profile_obj(first, source=source)
    entries: list[ProfileEntry] = []
    for lineno, item in parsed:
        if isinstance(item, dict) and "profile" in item and "subject" not in item:
            raise ProfileError(
                f"Cannot read profile {source}: line {lineno} is a whole user object, but a .jsonl "
                f"profile with several lines must hold one entry per line."
            )
        entries.append(_parse_entry(item, source, f"line {lineno}"))
    return ProfileData(user_id=None, entries=tuple(entries), identities=_identities([item for _, item in parsed]))


def _identities(items: list[object]) -> dict[str, str]:
    """Names and emails in the entries' `trailers` lists and in the trailer blocks at the end of
    their bodies (malformed trailers are skipped: they are optional)."""
    lines = [
        t
        for item in items
        if isinstance(item, dict) and isinstance(item.get("trailers"), list)
        for t in item["trailers"]
        if isinstance(t, str)
    ]
    lines += [t for item in items if isinstance(item, dict) for t in split_trailers(_body_text(item))[1]]
    return identities_from_trailers(lines)


def _body_text(item: dict[object, object]) -> str:
    body = item.get("body")
    return body if isinstance(body, str) else ""


def _parse_user_id(obj: dict[str, object], source: str) -> str | None:
    user_id = obj.get("user_id")
    if user_id is None or isinstance(user_id, str):
        return user_id
    raise ProfileError(f'Cannot read profile {source}: "user_id" must be a string, not {_json_type(user_id)}.')


def _parse_entry(item: object, source: str, where: str) -> ProfileEntry:
    prefix = f"Cannot read profile {source}: {where}"
    if not isinstance(item, dict):
        raise ProfileError(f"{prefix} must be a JSON object with a subject and body, not {_json_type(item)}.")

    if "subject" not in item:
        raise ProfileError(f'{prefix} has no "subject".')
    subject = item["subject"]
    if not isinstance(subject, str):
        raise ProfileError(f'{prefix} has a "subject" that is {_json_type(subject)}, not a string.')
    if not subject.strip():
        raise ProfileError(f'{prefix} has an empty "subject".')

    if "body" not in item:
        raise ProfileError(f'{prefix} has no "body" (use "" for a subject-only entry).')
    body = item["body"]
    if not isinstance(body, str):
        raise ProfileError(f'{prefix} has a "body" that is {_json_type(body)}, not a string.')

    # A body exported with its trailers (`git log --format=%B`) loses them as a `trailers` list
    # would be dropped: names and emails are no writing style (`_identities` keeps them apart).
    body = split_trailers(body)[0]
    return ProfileEntry(subject=subject.strip(), body=body, time=_parse_time(item.get("time"), prefix))


def _parse_time(value: object, prefix: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    # The dataset stores Unix seconds as JSON integers; keep them as their exact decimal text.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    raise ProfileError(f'{prefix} has a "time" that is {_json_type(value)}, not a string or number.')


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for messages a non-Python user can read."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
