"""Tests for sdk.context: profile loading, BM25 retrieval and context rendering.

Only files inside the project are used (the shipped demo profile and tests/fixtures), never the
shared dataset, so the suite runs on a fresh checkout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsteer.core.errors import ConfigError, ProfileError
from specsteer.core.prompts import context_text
from specsteer.sdk.context import Profile, ProfileEntry, ProfileIndex, fit_context

REPO = Path(__file__).resolve().parents[2]
DEMO_PROFILE = REPO / "sdk" / "data" / "demo_profile.json"
FIXTURE_USERS = REPO / "tests" / "fixtures" / "users.jsonl"

ENTRY_A = {"subject": "refs: speed up packed-refs lookup", "body": "Use a binary search.", "time": 10}
ENTRY_B = {"subject": "doc: fix typo", "body": "Spelling.", "trailers": ["Signed-off-by: X <x@example.invalid>"]}


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _fixture_users() -> list[dict[str, object]]:
    return [json.loads(line) for line in FIXTURE_USERS.read_text(encoding="utf-8").splitlines() if line]


# --- loading: every accepted format ---------------------------------------------------------------


def test_loads_dataset_user_object_and_ignores_queries_and_trailers() -> None:
    profile = Profile.from_file(DEMO_PROFILE)
    assert profile.user_id == "demo"
    assert len(profile.entries) == 40
    assert all(isinstance(e, ProfileEntry) and e.subject and e.time for e in profile.entries)
    assert not hasattr(profile.entries[0], "trailers")


@pytest.mark.parametrize(
    "content",
    [
        {"user_id": "u1", "profile": [ENTRY_A, ENTRY_B], "queries": [{"subject": "s", "target": "t"}]},
        {"user_id": "u1", "entries": [ENTRY_A, ENTRY_B]},
        [ENTRY_A, ENTRY_B],
    ],
    ids=["user-object", "entries-object", "list"],
)
def test_loads_json_formats(tmp_path: Path, content: object) -> None:
    profile = Profile.from_file(_write(tmp_path, "p.json", json.dumps(content)))
    assert [e.subject for e in profile.entries] == [ENTRY_A["subject"], ENTRY_B["subject"]]
    assert profile.entries[0] == ProfileEntry(subject=ENTRY_A["subject"], body="Use a binary search.", time="10")
    assert profile.entries[1].time is None
    assert profile.user_id == (None if isinstance(content, list) else "u1")


def test_loads_jsonl_with_one_entry_per_line(tmp_path: Path) -> None:
    text = json.dumps(ENTRY_A) + "\n\n" + json.dumps({**ENTRY_B, "extra": [1, 2]}) + "\n"
    profile = Profile.from_file(_write(tmp_path, "p.jsonl", text))
    assert profile.user_id is None
    assert [e.body for e in profile.entries] == ["Use a binary search.", "Spelling."]


def test_loads_single_user_line_jsonl(tmp_path: Path) -> None:
    line = FIXTURE_USERS.read_text(encoding="utf-8").splitlines()[0]
    profile = Profile.from_file(_write(tmp_path, "me.jsonl", line + "\n"))
    assert profile.user_id == json.loads(line)["user_id"]
    assert len(profile.entries) == 25


def test_accepts_utf8_bom_and_str_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.json", b"\xef\xbb\xbf" + json.dumps([ENTRY_A]).encode())
    assert len(Profile.from_file(str(path)).entries) == 1


def test_empty_profile_is_allowed(tmp_path: Path) -> None:
    for name, content in (("a.json", "[]"), ("b.json", '{"profile": []}')):
        profile = Profile.from_file(_write(tmp_path, name, content))
        assert profile.entries == ()
        assert ProfileIndex(profile).retrieve("anything", n=3) == []


def test_from_obj_uses_source_in_messages() -> None:
    assert Profile.from_obj([ENTRY_A]).entries[0].subject == ENTRY_A["subject"]
    with pytest.raises(ProfileError, match=r"^Cannot read profile request body: entry \[0\] has no \"subject\"\.$"):
        Profile.from_obj([{"body": ""}], source="request body")


def test_fixture_users_load() -> None:
    for user in _fixture_users():
        profile = Profile.from_obj(user, source=str(FIXTURE_USERS))
        assert len(profile.entries) == 25
        assert len(user["queries"]) == 4  # type: ignore[arg-type]


# --- loading: malformed input ---------------------------------------------------------------------

Maker = Callable[[Path], Path]

MALFORMED: list[tuple[str, Maker, str]] = [
    ("missing", lambda d: d / "nope.json", r"nope\.json: the file does not exist\."),
    ("directory", lambda d: d, r"it is a directory, not a file\."),
    (
        "not-utf8",
        lambda d: _write(d, "p.json", b'[{"subject": "caf\xe9"}]'),
        r"not UTF-8 text \(invalid byte at offset 17\)",
    ),
    ("empty-file", lambda d: _write(d, "p.json", ""), r"p\.json: the file is empty\."),
    ("blank-file", lambda d: _write(d, "p.jsonl", "\n  \n"), r"p\.jsonl: the file is empty\."),
    # Python 3.13's json points at the trailing comma (column 18), 3.11's at the brace after it (19).
    ("bad-json", lambda d: _write(d, "p.json", '[\n  {"subject": "a",}\n]'), r"invalid JSON at line 2, column 1[89]"),
    (
        "jsonl-named-json",
        lambda d: _write(d, "p.json", json.dumps(ENTRY_A) + "\n" + json.dumps(ENTRY_B)),
        r"line 2, column 1: Extra data \(a file with one JSON object per line must be named \.jsonl\)",
    ),
    ("deep-nesting", lambda d: _write(d, "p.json", "[" * 100_000), r"nests too deeply"),
    ("top-level-string", lambda d: _write(d, "p.json", '"hi"'), r"not a string\."),
    ("top-level-number", lambda d: _write(d, "p.json", "3"), r"not a number\."),
    ("no-profile-key", lambda d: _write(d, "p.json", '{"queries": []}'), r'has no "profile" or "entries" list'),
    (
        "profile-not-list",
        lambda d: _write(d, "p.json", '{"profile": {}}'),
        r'"profile" must be a list of entries, not an object',
    ),
    ("user-id-type", lambda d: _write(d, "p.json", '{"user_id": 3, "profile": []}'), r'"user_id" must be a string'),
    (
        "entry-not-object",
        lambda d: _write(d, "p.json", json.dumps([ENTRY_A, "x"])),
        r"entry \[1\] must be a JSON object",
    ),
    (
        "missing-subject",
        lambda d: _write(d, "p.json", '{"profile": [{"body": "b"}]}'),
        r'profile\[0\] has no "subject"',
    ),
    (
        "empty-subject",
        lambda d: _write(d, "p.json", '[{"subject": "  ", "body": ""}]'),
        r'entry \[0\] has an empty "subject"',
    ),
    ("subject-type", lambda d: _write(d, "p.json", '[{"subject": 1, "body": ""}]'), r'"subject" that is a number'),
    ("missing-body", lambda d: _write(d, "p.json", '{"entries": [{"subject": "s"}]}'), r'entries\[0\] has no "body"'),
    (
        "body-type",
        lambda d: _write(d, "p.json", '[{"subject": "s", "body": null}]'),
        r'"body" that is null, not a string',
    ),
    (
        "time-type",
        lambda d: _write(d, "p.json", '[{"subject": "s", "body": "", "time": []}]'),
        r'"time" that is a list',
    ),
    (
        "jsonl-bad-line",
        lambda d: _write(d, "p.jsonl", json.dumps(ENTRY_A) + "\n\n{oops\n"),
        r"line 3 is not valid JSON",
    ),
    (
        "jsonl-not-object",
        lambda d: _write(d, "p.jsonl", json.dumps(ENTRY_A) + "\n[1]\n"),
        r"line 2 must be a JSON object",
    ),
    ("jsonl-entry-field", lambda d: _write(d, "p.jsonl", '{"subject": "s"}\n'), r'line 1 has no "body"'),
    (
        "jsonl-several-users",
        lambda d: _write(d, "p.jsonl", FIXTURE_USERS.read_text(encoding="utf-8")),
        r"line 1 is a whole user object",
    ),
]


@pytest.mark.parametrize(("make", "pattern"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_profiles_raise_profile_error(tmp_path: Path, make: Maker, pattern: str) -> None:
    path = make(tmp_path)
    with pytest.raises(ProfileError, match=pattern) as info:
        Profile.from_file(path)
    message = str(info.value)
    # One readable sentence that names the file, with no raw json/OS exception chained under it.
    assert message.startswith(f"Cannot read profile {path}")
    assert message.endswith(".") and "\n" not in message
    err = info.value
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


# --- retrieval ------------------------------------------------------------------------------------


def _profile(*pairs: tuple[str, str]) -> Profile:
    return Profile(user_id=None, entries=tuple(ProfileEntry(subject=s, body=b) for s, b in pairs))


def test_distinctive_words_rank_first() -> None:
    profile = _profile(
        ("doc: fix typo in the manual", "A small spelling fix."),
        ("refs: teach the packed backend to mmap the file", "Keep the packed-refs file mmapped."),
        ("test: add a test for the manual", "More coverage for the manual."),
    )
    index = ProfileIndex(profile)
    assert index.retrieve("mmapped packed-refs", n=1) == [profile.entries[1]]
    assert index.retrieve("MANUAL spelling", n=2)[0] == profile.entries[0]


def test_demo_profile_retrieval_is_on_topic() -> None:
    index = ProfileIndex(Profile.from_file(DEMO_PROFILE))
    top = index.retrieve("mmapped_ref_iterator: inline into packed_ref_iterator", n=3)
    assert len(top) == 3
    assert "mmapped_ref_iterator" in top[0].subject + top[0].body


def test_n_larger_than_profile_returns_everything_best_first() -> None:
    profile = _profile(("alpha", "one"), ("beta gamma", "two"), ("gamma", "three"))
    got = ProfileIndex(profile).retrieve("gamma", n=10)
    assert len(got) == 3
    assert set(got) == set(profile.entries)
    assert got[-1] == profile.entries[0]  # the only entry without "gamma" comes last


@pytest.mark.parametrize("query", ["", "   ", "the and of it", "zzzunseenword"])
def test_query_without_indexed_terms_returns_first_n_in_profile_order(query: str) -> None:
    profile = _profile(("alpha", "one"), ("beta", "two"), ("gamma", "three"))
    assert ProfileIndex(profile).retrieve(query, n=2) == list(profile.entries[:2])


def test_ties_break_by_profile_order() -> None:
    profile = _profile(("fix refs", "same"), ("other", "words"), ("fix refs", "same"))
    got = ProfileIndex(profile).retrieve("refs", n=3)
    assert got == [profile.entries[0], profile.entries[2], profile.entries[1]]


def test_profile_with_no_indexable_words_does_not_crash() -> None:
    profile = _profile(("a", ""), ("of the", "I"))
    assert ProfileIndex(profile).retrieve("anything", n=5) == list(profile.entries)


def test_retrieve_rejects_bad_arguments() -> None:
    index = ProfileIndex(_profile(("alpha", "one")))
    assert index.retrieve("alpha", n=0) == []
    with pytest.raises(ConfigError, match="non-negative integer"):
        index.retrieve("alpha", n=-1)
    with pytest.raises(ConfigError, match="must be a string"):
        index.retrieve(None, n=1)  # type: ignore[arg-type]


def test_indexing_and_retrieval_print_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    ProfileIndex(Profile.from_file(DEMO_PROFILE)).retrieve("packed refs", n=3)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


# --- fit_context -------------------------------------------------------------------------------


def render_context(entries: list[ProfileEntry], *, max_chars: int = 1800) -> str:
    """The examples' text layout (what a base model reads)."""
    return context_text(fit_context(entries, max_chars=max_chars))


def test_render_context_layout_when_everything_fits() -> None:
    entries = [ProfileEntry("first subject", "Body one.\n\nSecond paragraph.\n"), ProfileEntry("second", "")]
    assert render_context(entries) == (
        "Subject: first subject\n\nBody one.\n\nSecond paragraph.\n\n---\n\nSubject: second"
    )
    assert render_context([]) == ""


def test_fit_context_gives_no_examples_when_not_even_a_subject_line_fits() -> None:
    assert fit_context([ProfileEntry("a long subject line", "body")], max_chars=12) == []


@pytest.mark.parametrize("max_chars", [1, 8, 30, 120, 400, 700, 1200, 1800, 5000])
def test_render_context_respects_max_chars_and_is_deterministic(max_chars: int) -> None:
    entries = ProfileIndex(Profile.from_file(DEMO_PROFILE)).retrieve("packed refs iterator", n=5)
    out = render_context(entries, max_chars=max_chars)
    assert len(out) <= max_chars
    assert out == render_context(list(entries), max_chars=max_chars)
    if max_chars >= 400:
        assert out.startswith(f"Subject: {entries[0].subject}\n\n")


def test_render_context_cuts_long_bodies_at_word_boundaries() -> None:
    long_body = " ".join(f"word{i}" for i in range(400))
    entries = [ProfileEntry("short", "Stays whole."), ProfileEntry("long", long_body)]
    out = render_context(entries, max_chars=600)
    assert len(out) <= 600
    assert "Subject: short\n\nStays whole." in out
    kept = out.rsplit("\n\n", 1)[1]
    assert kept.endswith("…")
    head = kept[:-1]
    assert long_body.startswith(head) and long_body[len(head)] == " "


def test_render_context_drops_trailing_entries_rather_than_stubs() -> None:
    entries = [ProfileEntry(f"subject {i}", "x " * 400) for i in range(6)]
    out = render_context(entries, max_chars=500)
    assert len(out) <= 500
    assert "Subject: subject 0" in out
    assert "Subject: subject 5" not in out


def test_render_context_never_includes_trailers() -> None:
    out = render_context(Profile.from_file(DEMO_PROFILE).entries, max_chars=10**7)
    assert "example.invalid" not in out and "Signed-off-by" not in out


def test_trailers_at_the_end_of_a_body_are_cut_and_their_people_registered() -> None:
    """`git log --format=%B` (and the README's {"subject", "body"} lines) put the trailers in the
    body: they stayed in the Specialist's context, and their names were never registered."""
    body = "Tweak flags for the ARM build.\n\nSigned-off-by: Marek Kowalczyk <marek@kowal.pl>\nFixes: #12\n"
    note = "Keep the old path.\n\nNote: the cache is rebuilt on start."  # a last paragraph of the body's own
    build = "Switch the CI toolchain.\n\nCC: clang 17\nCXX: clang++ 17\nOS: Ubuntu Jammy"  # settings, no people
    crlf = "Fix foo\r\n  \r\n(cherry picked from commit 1c2d3e4)\r\nCo-authored-by: Ann Lee <ann@x.example>"
    items = [{"subject": "Fix build", "body": body}, {"subject": "s", "body": note}, {"subject": "t", "body": build}]
    profile = Profile.from_obj({"profile": items})
    assert [e.body for e in profile.entries] == ["Tweak flags for the ARM build.", note, build]
    assert dict(profile.identities) == {"Marek Kowalczyk": "name", "marek@kowal.pl": "email"}
    assert "Kowalczyk" not in render_context(profile.entries, max_chars=10**4)
    # A CRLF body, a blank line of spaces and a cherry-pick note inside the block: still a block.
    other = Profile.from_obj({"profile": [{"subject": "Fix", "body": crlf}]})
    assert [e.body for e in other.entries] == ["Fix foo"]
    assert dict(other.identities) == {"Ann Lee": "name", "ann@x.example": "email"}


def test_a_number_past_pythons_digit_limit_is_one_sentence(tmp_path: Path) -> None:
    """json.loads raised a bare ValueError (with Python's own hint) from every reader of profiles."""
    huge = "1" * 5000
    for name, text in [
        ("p.json", f'[{{"subject": "a", "body": "b", "time": {huge}}}]'),
        ("p.jsonl", f'{{"x": {huge}}}'),
    ]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ProfileError, match="holds a number of more than 4,300 digits, which no field takes"):
            Profile.from_file(path)


def test_render_context_rejects_bad_budget() -> None:
    with pytest.raises(ConfigError, match="max_chars"):
        render_context([ProfileEntry("s", "b")], max_chars=0)


_texts = st.text(alphabet=st.sampled_from("ab cd\n\téf"), max_size=300)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(_texts.filter(str.strip), _texts), max_size=6),
    max_chars=st.integers(min_value=1, max_value=900),
)
def test_render_context_budget_property(pairs: list[tuple[str, str]], max_chars: int) -> None:
    entries = [ProfileEntry(s, b) for s, b in pairs]
    out = render_context(entries, max_chars=max_chars)
    assert len(out) <= max_chars
    assert out == render_context(entries, max_chars=max_chars)


# --- shipped data hygiene -------------------------------------------------------------------------

_SYNTHETIC_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@example\.invalid\b")
_SYNTHETIC_TRAILER = re.compile(r"^[A-Za-z-]+: [A-Za-z0-9 ]+ <[a-z0-9.]+@example\.invalid>$")


@pytest.mark.parametrize("path", [DEMO_PROFILE, FIXTURE_USERS], ids=["demo", "fixtures"])
def test_shipped_files_have_no_real_addresses(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "@" not in _SYNTHETIC_EMAIL.sub("", text)


def test_shipped_files_have_only_synthetic_trailers_and_distinct_personas() -> None:
    demo = json.loads(DEMO_PROFILE.read_text(encoding="utf-8"))
    users = [demo, *_fixture_users()]
    identities: list[set[str]] = []
    for user in users:
        trailers = [t for entry in user["profile"] for t in entry["trailers"]]
        assert trailers and all(_SYNTHETIC_TRAILER.match(t) for t in trailers), trailers[:3]
        identities.append({t.split(": ", 1)[1] for t in trailers})
    # Each user's synthetic people are their own, so a leaked canary points at exactly one user.
    for i, mine in enumerate(identities):
        for theirs in identities[i + 1 :]:
            assert not mine & theirs


def test_shipped_file_sizes_and_shapes() -> None:
    assert DEMO_PROFILE.stat().st_size < 60_000
    assert FIXTURE_USERS.stat().st_size < 150_000
    demo = json.loads(DEMO_PROFILE.read_text(encoding="utf-8"))
    assert demo["user_id"] == "demo" and len(demo["queries"]) == 3
    assert all(q["subject"] and q["target"] for q in demo["queries"])
    assert len(_fixture_users()) == 3


def test_sealed_profile_opens_in_memory_with_the_passphrase(tmp_path, monkeypatch) -> None:
    # Prepare: seal a profile with a cheap scrypt cost (the lowest the vault allows).
    from specsteer.privacy.vault import ENV_KEY, ENV_PASSPHRASE, PassphraseKeyProvider, ProfileVault

    plain = json.dumps({"profile": [{"subject": "fix: a", "body": "Private words here."}]}).encode()
    vault = tmp_path / "me.vault"
    ProfileVault.seal(plain, vault, PassphraseKeyProvider("correct horse", n=2**14))
    assert b"Private words" not in vault.read_bytes()
    monkeypatch.delenv(ENV_KEY, raising=False)
    # Execute / Assert: no passphrase, a wrong one, the right one.
    monkeypatch.delenv(ENV_PASSPHRASE, raising=False)
    with pytest.raises(ProfileError, match="encrypted: set SPECSTEER_VAULT_PASSPHRASE"):
        Profile.from_file(vault)
    with pytest.raises(ProfileError, match=r"Cannot read profile .*me\.vault"):
        Profile.from_file(vault, key_provider=PassphraseKeyProvider("wrong", n=2**14))
    monkeypatch.setenv(ENV_PASSPHRASE, "correct horse")
    profile = Profile.from_file(vault)
    assert profile.entries[0].body == "Private words here."
