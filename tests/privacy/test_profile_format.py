"""privacy.profile_format as the one reader of the profile and dataset-user format (issue #46, Build 8).

Four readers (the device's profile, the leakage report's `--data`, a federation device's data and
the benchmarks' dataset) had their own rules and errors: a dataset entry with no subject passed
the leakage report and the benchmarks and failed only the device that drew that user.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from specsteer.core.errors import ProfileError
from specsteer.privacy.errors import PrivacyError
from specsteer.privacy.profile_format import read_profile, read_users
from specsteer.privacy.vault import PassphraseKeyProvider, ProfileVault

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_USERS = ROOT / "tests" / "fixtures" / "users.jsonl"
ENTRY = {
    "subject": "refs: speed up lookup",
    "body": "Use a binary search.",
    "trailers": ["Signed-off-by: A B <a@b.example>"],
}


def _dataset(tmp_path: Path, *users: object, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(u) + "\n" for u in users), encoding="utf-8")
    return path


def test_a_dataset_gives_each_user_parsed_and_as_stored() -> None:
    # Execute
    users = read_users(FIXTURE_USERS)
    # Assert: one user a line, the stored entries keep their trailers, the parsed ones do not.
    stored = [json.loads(line) for line in FIXTURE_USERS.read_text(encoding="utf-8").splitlines() if line]
    assert [u.user_id for u in users] == [s["user_id"] for s in stored]
    assert users[0].user_object == stored[0]
    assert users[0].stored_entries == tuple(stored[0]["profile"])
    assert users[0].queries == tuple(stored[0]["queries"])
    assert len(users[0].data.entries) == len(stored[0]["profile"])
    assert users[0].trailer_identities() and set(users[0].trailer_identities()) <= set(users[0].data.identities)


def test_a_profile_file_is_one_user_without_a_user_object(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps([ENTRY]), encoding="utf-8")
    (user,) = read_users(path)
    assert user.user_id is None and user.user_object is None and user.queries == ()
    assert user.stored_entries == (ENTRY,) and user.history_texts() == [ENTRY["subject"], ENTRY["body"]]
    assert user.trailer_identities() == {"A B": "name", "a@b.example": "email"}


@pytest.mark.parametrize(
    ("users", "pattern"),
    [
        (
            [{"user_id": "u1", "profile": [ENTRY]}, {"user_id": "u2", "profile": [{"body": "b"}]}],
            r'^Cannot read profile .*data\.jsonl: line 2, profile\[0\] has no "subject"\.$',
        ),
        (
            [{"user_id": "u1", "profile": [ENTRY]}, {"user_id": 7, "profile": []}],
            r'^Cannot read profile .*data\.jsonl: line 2, "user_id" must be a string, not a number\.$',
        ),
        (
            [{"user_id": "u1", "profile": [ENTRY]}, {"user_id": "u2", "profile": {}}],
            r'^Cannot read profile .*data\.jsonl: line 2, "profile" must be a list of entries, not an object\.$',
        ),
        (
            [ENTRY, {"user_id": "u2", "profile": []}],
            r"line 2 is a whole user object, but a \.jsonl profile with several lines must hold one entry per line\.$",
        ),
    ],
    ids=["entry-without-subject", "user-id-type", "profile-not-a-list", "user-among-entries"],
)
def test_a_malformed_dataset_line_is_named_in_one_sentence(tmp_path: Path, users: list[object], pattern: str) -> None:
    path = _dataset(tmp_path, *users)
    with pytest.raises(ProfileError, match=pattern) as info:
        read_users(path)
    assert info.value.__cause__ is None and "\n" not in str(info.value)


def test_a_profile_is_one_users_and_a_dataset_is_refused_as_one(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"line 1 is a whole user object"):
        read_profile(FIXTURE_USERS)
    one = _dataset(tmp_path, {"user_id": "u1", "profile": [ENTRY]}, name="me.jsonl")
    assert read_profile(one).user_id == "u1"


def test_what_names_the_file_and_a_sealed_dataset_opens_or_says_the_key_is_wrong(tmp_path: Path) -> None:
    # Prepare
    sealed = tmp_path / "data.vault"
    ProfileVault.seal(FIXTURE_USERS.read_bytes(), sealed, PassphraseKeyProvider("pw", n=2**14))
    # Execute / Assert
    with pytest.raises(ProfileError, match=r"^Cannot read the data file .*nope\.jsonl: the file does not exist\.$"):
        read_users(tmp_path / "nope.jsonl", what="the data file")
    assert len(read_users(sealed, key_provider=PassphraseKeyProvider("pw", n=2**14))) == len(read_users(FIXTURE_USERS))
    with pytest.raises(
        ProfileError, match=r"^Cannot read the data file .*data\.vault: it is sealed with another passphrase or key\.$"
    ):
        read_users(sealed, key_provider=PassphraseKeyProvider("wrong", n=2**14), what="the data file")


def test_every_reader_of_the_format_has_its_rules_and_its_sentence(tmp_path: Path) -> None:
    """The device, the leakage report, a federation device and the benchmarks refuse the same
    malformed dataset with the same sentence (before, only some of them refused it at all)."""
    from bench.dataset import first_users
    from specsteer.federation.task import load_user
    from specsteer.privacy.data import read_users as report_users

    # Prepare: the second user's first entry has no subject.
    path = _dataset(tmp_path, {"user_id": "u1", "profile": [ENTRY]}, {"user_id": "u2", "profile": [{"body": "b"}]})
    bad = r'line 2, profile\[0\] has no "subject"\.$'
    # Execute / Assert
    with pytest.raises(PrivacyError, match=bad):
        report_users(path)
    with pytest.raises(ProfileError, match=bad):
        first_users(path, 1)
    with pytest.raises(ProfileError, match=bad):
        load_user(path, index=0)


def _decodes(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("loads", "load")
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "json"
        for n in ast.walk(node)
    )


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _parses_the_format(tree: ast.AST) -> list[str]:
    """Functions that read a user object's ``"profile"`` key from JSON they decoded themselves
    (followed through assignments, loops and comprehensions)."""
    found: list[str] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decoded: set[str] = set()
        while True:
            before = len(decoded)
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
                    if _decodes(n.value) or _names(n.value) & decoded:
                        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                        decoded |= {name for t in targets for name in _names(t)}
                elif isinstance(n, ast.For | ast.comprehension) and (_decodes(n.iter) or _names(n.iter) & decoded):
                    decoded |= _names(n.target)
            if len(decoded) == before:
                break

        def from_json(node: ast.AST, decoded: set[str] = decoded) -> bool:
            return _decodes(node) or bool(_names(node) & decoded)

        for n in ast.walk(fn):
            reads = (
                (
                    isinstance(n, ast.Subscript)
                    and isinstance(n.slice, ast.Constant)
                    and n.slice.value == "profile"
                    and from_json(n.value)
                )
                or (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr == "get"
                    and n.args
                    and isinstance(n.args[0], ast.Constant)
                    and n.args[0].value == "profile"
                    and from_json(n.func.value)
                )
                or (
                    isinstance(n, ast.Compare)
                    and isinstance(n.left, ast.Constant)
                    and n.left.value == "profile"
                    and any(from_json(c) for c in n.comparators)
                )
            )
            if reads:
                found.append(f"{fn.name}:{n.lineno}")
    return found


def test_only_profile_format_parses_the_dataset_user_format() -> None:
    """A function that json-decodes and reads a user object's "profile" key is a reader of the
    format; only `privacy.profile_format` may hold one (the others call `read_users`)."""
    offenders: dict[str, list[str]] = {}
    for package in ("core", "sdk", "server", "audit", "privacy", "federation", "bench", "demo"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "privacy" / "profile_format.py" or "_pb2" in path.name:
                continue
            hits = _parses_the_format(ast.parse(path.read_text(encoding="utf-8")))
            if hits:
                offenders[str(path.relative_to(ROOT))] = hits
    assert not offenders, offenders
