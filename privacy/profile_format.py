"""The profile and dataset file format: JSON, JSONL or dataset user objects, sealed or not.

Every reader of the format calls this module: the device (`sdk.context.Profile`), `privacy seal`,
the leakage report (`privacy.data`), the federation's devices (`federation.task`) and the
benchmarks. Every problem raises `ProfileError` with one sentence naming the file.

Accepted files:

* a JSON user object as in the dataset: ``{"user_id": ..., "profile": [...], "queries": [...]}``,
  or ``{"entries": [...]}``;
* a JSON list of entries;
* a ``.jsonl`` / ``.ndjson`` file with one entry per line, or with one dataset user object per line
  (a dataset: `read_users` gives each user, `read_profile` refuses more than one).

Each entry is an object with a non-empty string ``subject`` and a string ``body``; ``time`` (string or
number) is optional, ``trailers`` and any unknown keys are ignored (the names and emails in
``trailers`` are returned apart, as identities, for the egress guard only). A body that ends in its
own trailer block (``git log --format=%B``: a last paragraph of ``Key: value`` lines, one at least
naming a person) loses it the same way (`privacy.canaries.split_trailers`). ``queries`` are kept as
the file holds them (their objects only) and checked no further: only benchmarks read them.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsteer.core.errors import ProfileError
from specsteer.privacy.canaries import identities_from_trailers, names_in_prose, split_trailers
from specsteer.privacy.spans import NAME
from specsteer.privacy.vault import (
    KeyProvider,
    ProfileVault,
    VaultError,
    WrongKeyError,
    environment_key_provider,
    is_vault,
)

__all__ = ["DatasetUser", "ProfileData", "ProfileEntry", "parse_profile_obj", "read_profile", "read_users"]

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


@dataclass(frozen=True)
class DatasetUser:
    """One user of a profile or dataset file: parsed, and as stored (the leakage report looks for
    the stored trailers' names in the uplink; a benchmark writes subsets of the stored objects)."""

    data: ProfileData
    # The entries as the file holds them, `trailers` and unknown keys included (each passed the
    # format's rules as `data`'s entry).
    stored_entries: tuple[dict[str, Any], ...]
    queries: tuple[dict[str, Any], ...] = ()
    # The dataset user object as stored (a ``"profile"`` object); None for a file of bare entries.
    user_object: dict[str, Any] | None = None

    @property
    def user_id(self) -> str | None:
        return self.data.user_id

    def history_texts(self) -> list[str]:
        """Stored subjects and bodies (no `trailers` lists): what the Specialist's context is made of."""
        return [t for e in self.stored_entries for t in (e.get("subject", ""), e.get("body", "")) if t]

    def trailer_identities(self) -> dict[str, str]:
        """Names and emails of the stored entries' `trailers` lists, as {string: kind}."""
        out: dict[str, str] = {}
        for e in self.stored_entries:
            trailers = e.get("trailers")
            if isinstance(trailers, list):
                out.update(identities_from_trailers([t for t in trailers if isinstance(t, str)]))
        return out


def read_users(
    path: str | Path, *, key_provider: KeyProvider | None = None, what: str = "profile"
) -> list[DatasetUser]:
    """The users of a profile or dataset file, in file order: one for a profile, one per line for
    a dataset. A sealed file (`privacy seal`) is decrypted in memory only.

    The key comes from `key_provider`, or by default from `$SPECSTEER_VAULT_KEY` /
    `$SPECSTEER_VAULT_PASSPHRASE`; the plaintext is never written anywhere. `what` names the file
    in errors: ``Cannot read {what} {path}: ...``.
    """
    p = Path(path)
    label = f"{what} {p}"
    if is_vault(p):
        try:
            raw = ProfileVault.open(
                p, key_provider or environment_key_provider(f"Cannot read {label}: it is encrypted")
            )
        except WrongKeyError:
            raise ProfileError(f"Cannot read {label}: it is sealed with another passphrase or key.") from None
        except VaultError as exc:
            raise ProfileError(f"Cannot read {label}: {exc}.") from None
        return _from_bytes(raw, label, jsonl=None)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ProfileError(f"Cannot read {label}: the file does not exist.") from None
    except IsADirectoryError:
        raise ProfileError(f"Cannot read {label}: it is a directory, not a file.") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ProfileError(f"Cannot read {label}: {reason}.") from None
    return _from_bytes(raw, label, jsonl=p.suffix.lower() in _JSONL_SUFFIXES)


def read_profile(path: str | Path, *, key_provider: KeyProvider | None = None) -> ProfileData:
    """Read and parse a profile file: one user's history (`read_users` for its rules and keys)."""
    users = read_users(path, key_provider=key_provider)
    if len(users) > 1:
        # `head -1 dataset.jsonl > me.jsonl` takes one user out; several make the choice ambiguous.
        raise ProfileError(
            f"Cannot read profile {Path(path)}: line 1 is a whole user object, but a .jsonl profile with "
            f"several lines must hold one entry per line."
        )
    return users[0].data


def parse_profile_obj(obj: object, *, source: str = "<profile>") -> ProfileData:
    """Parse already-decoded JSON (a user object or a list of entries); `source` names it in errors."""
    return _user(obj, f"profile {source}").data


def _user(obj: object, label: str, at: str = "") -> DatasetUser:
    """One user from a decoded JSON document; `at` (``"line 3, "``) places it in a JSONL file."""
    user_id: str | None = None
    queries: tuple[dict[str, Any], ...] = ()
    user_object: dict[str, Any] | None = None
    if isinstance(obj, dict):
        user_id = _parse_user_id(obj, label, at)
        key = "profile" if "profile" in obj else "entries" if "entries" in obj else None
        if key is None:
            raise ProfileError(f'Cannot read {label}: {at}the JSON object has no "profile" or "entries" list.')
        items = obj[key]
        if not isinstance(items, list):
            raise ProfileError(f'Cannot read {label}: {at}"{key}" must be a list of entries, not {_json_type(items)}.')
        where = f"{at}{key}[{{}}]"
        stored_queries = obj.get("queries")
        if isinstance(stored_queries, list):
            queries = tuple(q for q in stored_queries if isinstance(q, dict))
        user_object = obj if key == "profile" else None
    elif isinstance(obj, list):
        items = obj
        where = "entry [{}]"
    else:
        raise ProfileError(
            f'Cannot read {label}: expected a JSON object with a "profile" list or a JSON '
            f"list of entries, not {_json_type(obj)}."
        )
    entries = tuple(_parse_entry(item, label, where.format(i)) for i, item in enumerate(items))
    data = ProfileData(user_id=user_id, entries=entries, identities=_identities(items))
    return DatasetUser(data, tuple(items), queries, user_object)


def _from_bytes(raw: bytes, label: str, *, jsonl: bool | None) -> list[DatasetUser]:
    """Parse file bytes; `jsonl=None` (a sealed file has no telling suffix) tries JSON, then JSONL."""
    try:
        # utf-8-sig: editors on Windows often prepend a BOM, which is still valid UTF-8 text.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"Cannot read {label}: it is not UTF-8 text (invalid byte at offset {exc.start}).") from None

    if not text.strip():
        raise ProfileError(f"Cannot read {label}: the file is empty.")

    if jsonl:
        return _from_jsonl(text, label)
    if jsonl is None:
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return _from_jsonl(text, label)
        except ValueError:  # a number past Python's digit limit for int()
            raise ProfileError(f"Cannot read {label}: it holds {_HUGE_NUMBER}.") from None
        return [_user(obj, label)]

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = ""
        if exc.msg == "Extra data":
            hint = " (a file with one JSON object per line must be named .jsonl)"
        raise ProfileError(
            f"Cannot read {label}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}{hint}."
        ) from None
    except RecursionError:
        raise ProfileError(f"Cannot read {label}: the JSON nests too deeply.") from None
    except ValueError:  # a number past Python's digit limit for int()
        raise ProfileError(f"Cannot read {label}: it holds {_HUGE_NUMBER}.") from None
    return [_user(obj, label)]


def _is_user_line(item: object) -> bool:
    return isinstance(item, dict) and "profile" in item and "subject" not in item


def _from_jsonl(text: str, label: str) -> list[DatasetUser]:
    parsed: list[tuple[int, object]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ProfileError(
                f"Cannot read {label}: line {lineno} is not valid JSON (column {exc.colno}: {exc.msg})."
            ) from None
        except RecursionError:
            raise ProfileError(f"Cannot read {label}: line {lineno} nests JSON too deeply.") from None
        except ValueError:  # a number past Python's digit limit for int()
            raise ProfileError(f"Cannot read {label}: line {lineno} holds {_HUGE_NUMBER}.") from None

    # One user object a line is a dataset; `head -1 dataset.jsonl > me.jsonl` (one such line) is
    # the obvious way to pull one user out of it.
    first = parsed[0][1]
    if len(parsed) == 1 and isinstance(first, dict) and "profile" in first:
        return [_user(first, label)]
    if all(_is_user_line(item) for _, item in parsed):
        return [_user(item, label, f"line {lineno}, ") for lineno, item in parsed]
    entries: list[ProfileEntry] = []
    for lineno, item in parsed:
        if _is_user_line(item):
            raise ProfileError(
                f"Cannot read {label}: line {lineno} is a whole user object, but a .jsonl "
                f"profile with several lines must hold one entry per line."
            )
        entries.append(_parse_entry(item, label, f"line {lineno}"))
    items = [item for _, item in parsed]
    data = ProfileData(user_id=None, entries=tuple(entries), identities=_identities(items))
    return [DatasetUser(data, tuple(i for i in items if isinstance(i, dict)))]


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
    out = identities_from_trailers(lines)
    # Names the bodies' prose quotes in another script (issue #49, finding 3), registered once here.
    for item in items:
        if isinstance(item, dict):
            for name in names_in_prose(split_trailers(_body_text(item))[0]):
                out.setdefault(name, NAME)
    return out


def _body_text(item: dict[object, object]) -> str:
    body = item.get("body")
    return body if isinstance(body, str) else ""


def _parse_user_id(obj: dict[str, object], label: str, at: str) -> str | None:
    user_id = obj.get("user_id")
    if user_id is None or isinstance(user_id, str):
        return user_id
    raise ProfileError(f'Cannot read {label}: {at}"user_id" must be a string, not {_json_type(user_id)}.')


def _parse_entry(item: object, label: str, where: str) -> ProfileEntry:
    prefix = f"Cannot read {label}: {where}"
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
