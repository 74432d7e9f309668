"""Regenerate the demo profile and the test fixtures from the commit-bodies dataset.

    .venv/bin/python tools/make_fixtures.py --input /path/to/commit-bodies-dev.jsonl

writes ``sdk/data/demo_profile.json`` (one user, ``"user_id": "demo"``) and
``tests/fixtures/users.jsonl`` (a few users, one per line), both in the dataset's user-object format.

The dataset's trailers carry real names and email addresses, and some bodies quote them too. Neither
may ship with the project, so every person found in any trailer of the whole input, and every email
address anywhere, is replaced by a clearly synthetic identity under ``example.invalid``; the user's own
identity becomes the persona (``Demo User``, ``Test User One``...), which later doubles as a leakage
canary. Entries that would still contain an ``@`` after that (``HEAD@{1}``, ``$@``...) are skipped
so the shipped files pass a plain "no @ outside example.invalid" check. The output is a pure function
of the arguments and the input file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INPUT = Path("/work/shared/data/commit-bodies-dev.jsonl")
DEFAULT_DEMO_OUT = REPO_ROOT / "sdk" / "data" / "demo_profile.json"
DEFAULT_FIXTURES_OUT = REPO_ROOT / "tests" / "fixtures" / "users.jsonl"

SYNTHETIC_DOMAIN = "example.invalid"
FIXTURE_PERSONAS = ("One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten")

# Trailer keys that name a person. Others (Message-ID, Link...) carry no style and are dropped.
_PERSON_KEYS = frozenset({"cc", "to", "from", "thanks-to"})
_TRAILER_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*:\s*(.*?)\s*$")
_NAME_EMAIL_RE = re.compile(r"^(?P<name>[^<]*?)\s*<(?P<email>[^>]*)>?\s*$")
# Deliberately broad: Message-IDs and bare user@host strings are personal data just like addresses.
_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_SYNTHETIC_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@" + re.escape(SYNTHETIC_DOMAIN) + r"\b")
# Shorter "names" would match ordinary words in bodies.
_MIN_NAME_CHARS = 3


@dataclass(frozen=True)
class Persona:
    name: str
    email: str

    def trailer(self, key: str) -> str:
        return f"{key}: {self.name} <{self.email}>"


@dataclass
class People:
    """Every person named in any trailer of the input: their name variants and addresses."""

    key_of_name: dict[str, str] = field(default_factory=dict)
    key_of_email: dict[str, str] = field(default_factory=dict)

    def add(self, name: str | None, email: str | None) -> str | None:
        """Register a trailer's person and return a stable key for them (None if nothing usable)."""
        name = (name or "").strip().strip("\"'").strip()
        email = (email or "").strip().lower() or None
        key = (self.key_of_email.get(email) if email else None) or (
            self.key_of_name.get(name.casefold()) if name else None
        )
        key = key or (name.casefold() if name else email)
        if key is None:
            return None
        for variant in _name_variants(name):
            self.key_of_name.setdefault(variant.casefold(), key)
        if email:
            self.key_of_email.setdefault(email, key)
        return key

    def names(self) -> list[str]:
        return list(self.key_of_name)


def _name_variants(name: str) -> list[str]:
    # "Josh Chia (谢任中)" is quoted in bodies as either half.
    variants = [name]
    m = re.match(r"^(.*?)\s*\((.*)\)\s*$", name)
    if m:
        variants += [m.group(1), m.group(2)]
    return [v for v in (v.strip() for v in variants) if len(v) >= _MIN_NAME_CHARS and "@" not in v]


def parse_trailer(line: str) -> tuple[str, str | None, str | None] | None:
    """(key, name, email) of a person trailer, or None for trailers that name nobody."""
    m = _TRAILER_RE.match(line)
    if not m:
        return None
    key, value = m.group(1), m.group(2)
    if not (key.lower().endswith("-by") or key.lower() in _PERSON_KEYS):
        return None
    ne = _NAME_EMAIL_RE.match(value)
    if ne:
        return key, ne.group("name"), ne.group("email")
    if _EMAIL_RE.fullmatch(value):
        return key, None, value
    return key, value, None


def collect_people(users: Iterable[dict[str, object]]) -> People:
    people = People()
    for user in users:
        for entry in _profile(user):
            for line in entry.get("trailers") or []:
                parsed = parse_trailer(str(line))
                if parsed:
                    people.add(parsed[1], parsed[2])
    return people


def find_author(user: dict[str, object], people: People) -> str | None:
    """The user's own identity: by git convention the author's sign-off is the first one."""
    votes: Counter[str] = Counter()
    for entry in _profile(user):
        for line in entry.get("trailers") or []:
            parsed = parse_trailer(str(line))
            if parsed and parsed[0].lower() == "signed-off-by":
                key = people.add(parsed[1], parsed[2])
                if key:
                    votes[key] += 1
                break
    if not votes:
        return None
    # Sort before most_common so a tie cannot depend on dict order.
    return sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


class Scrubber:
    """Replaces real people with synthetic ones for one output user, consistently."""

    def __init__(self, people: People, persona: Persona, author_key: str | None) -> None:
        self.people = people
        self.persona = persona
        self.mapping: dict[str, Persona] = {}
        if author_key is not None:
            self.mapping[author_key] = persona
        names = sorted(people.names(), key=lambda n: (-len(n), n))
        # Emails first in the alternation so "Name <name@host>" never splits an address.
        name_alt = "|".join(re.escape(n) for n in names) or r"(?!x)x"
        self._pattern = re.compile(rf"(?P<email>{_EMAIL_RE.pattern})|(?<!\w)(?P<name>{name_alt})(?!\w)", re.IGNORECASE)

    def persona_for(self, key: str) -> Persona:
        if key not in self.mapping:
            k = len([p for p in self.mapping.values() if p is not self.persona]) + 1
            local = self.persona.email.split("@", 1)[0]
            self.mapping[key] = Persona(
                f"{self.persona.name} Colleague {k}", f"{local}.colleague{k}@{SYNTHETIC_DOMAIN}"
            )
        return self.mapping[key]

    def text(self, text: str) -> str:
        return self._pattern.sub(self._replace, text)

    def _replace(self, m: re.Match[str]) -> str:
        email = m.group("email")
        if email is not None:
            if email.lower().endswith("@" + SYNTHETIC_DOMAIN):
                return email
            key = self.people.key_of_email.get(email.lower()) or f"email:{email.lower()}"
            return self.persona_for(key).email
        key = self.people.key_of_name[m.group("name").casefold()]
        return self.persona_for(key).name

    def trailers(self, lines: Sequence[object]) -> list[str]:
        out: list[str] = []
        for line in lines:
            parsed = parse_trailer(str(line))
            if not parsed:
                continue
            key = self.people.add(parsed[1], parsed[2])
            if key:
                out.append(self.persona_for(key).trailer(parsed[0]))
        return out


def has_stray_at(text: str) -> bool:
    return "@" in _SYNTHETIC_EMAIL_RE.sub("", text)


def build_user(
    user: dict[str, object],
    *,
    people: People,
    persona: Persona,
    user_id: str,
    n_entries: int,
    n_queries: int,
    min_body: int,
    max_body: int,
) -> dict[str, object]:
    """One output user: the newest usable profile entries (in order) and the oldest usable queries.

    Newest entries because they are closest in time and topic to the queries; oldest queries for the
    same reason.
    """
    scrub = Scrubber(people, persona, find_author(user, people))

    picked: list[dict[str, object]] = []
    for entry in reversed(_profile(user)):
        subject, body = scrub.text(str(entry["subject"])), scrub.text(str(entry["body"]))
        if not min_body <= len(body) <= max_body or has_stray_at(subject + body):
            continue
        picked.append(
            {
                "subject": subject,
                "body": body,
                "trailers": scrub.trailers(entry.get("trailers") or []),
                "time": entry.get("time"),
            }
        )
        if len(picked) == n_entries:
            break
    picked.reverse()

    queries: list[dict[str, object]] = []
    for query in _records(user, "queries"):
        subject, target = scrub.text(str(query["subject"])), scrub.text(str(query["target"]))
        if not min_body <= len(target) <= max_body or has_stray_at(subject + target):
            continue
        queries.append({"subject": subject, "target": target, "time": query.get("time")})
        if len(queries) == n_queries:
            break

    source = user.get("user_id")
    if len(picked) < n_entries or len(queries) < n_queries:
        raise SystemExit(
            f"make_fixtures: user {source} has only {len(picked)} usable entries and {len(queries)} usable "
            f"queries (wanted {n_entries} and {n_queries}); widen --min-body/--max-body or pick another user."
        )
    return {"user_id": user_id, "profile": picked, "queries": queries}


def check_clean(serialized: str, people: People, what: str) -> None:
    """Refuse to write output that still names a real person or carries a real address."""
    if has_stray_at(serialized):
        raise SystemExit(f"make_fixtures: {what} still contains an '@' outside {SYNTHETIC_DOMAIN}.")
    lowered = serialized.casefold()
    for name in people.names():
        if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", lowered):
            raise SystemExit(f"make_fixtures: {what} still contains the real name {name!r}.")


def _profile(user: dict[str, object]) -> list[dict[str, object]]:
    return _records(user, "profile")


def _records(user: dict[str, object], key: str) -> list[dict[str, object]]:
    records = user.get(key)
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def load_users(path: Path) -> dict[str, dict[str, object]]:
    users: dict[str, dict[str, object]] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                user = json.loads(line)
                users[str(user["user_id"])] = user
    return users


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="commit-bodies JSONL dataset")
    ap.add_argument("--demo-user", default="u10", help="dataset user for the demo profile")
    ap.add_argument("--demo-entries", type=int, default=40)
    ap.add_argument("--demo-queries", type=int, default=3)
    ap.add_argument("--demo-out", type=Path, default=DEFAULT_DEMO_OUT)
    ap.add_argument("--fixture-users", default="u04,u09,u12", help="comma-separated dataset users")
    ap.add_argument("--fixture-entries", type=int, default=25)
    ap.add_argument("--fixture-queries", type=int, default=4)
    ap.add_argument("--fixtures-out", type=Path, default=DEFAULT_FIXTURES_OUT)
    ap.add_argument("--min-body", type=int, default=80, help="skip bodies/targets shorter than this")
    ap.add_argument("--max-body", type=int, default=900, help="skip bodies/targets longer than this")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    users = load_users(args.input)
    people = collect_people(users.values())
    fixture_ids = [u.strip() for u in args.fixture_users.split(",") if u.strip()]
    for uid in [args.demo_user, *fixture_ids]:
        if uid not in users:
            raise SystemExit(f"make_fixtures: no user {uid!r} in {args.input}.")
    if len(fixture_ids) > len(FIXTURE_PERSONAS):
        raise SystemExit(f"make_fixtures: at most {len(FIXTURE_PERSONAS)} fixture users.")
    bounds = {"min_body": args.min_body, "max_body": args.max_body}

    demo = build_user(
        users[args.demo_user],
        people=people,
        persona=Persona("Demo User", f"demo.user@{SYNTHETIC_DOMAIN}"),
        user_id="demo",
        n_entries=args.demo_entries,
        n_queries=args.demo_queries,
        **bounds,
    )
    demo_text = json.dumps(demo, ensure_ascii=False, indent=1) + "\n"
    check_clean(demo_text, people, str(args.demo_out))

    lines: list[str] = []
    for uid, word in zip(fixture_ids, FIXTURE_PERSONAS, strict=False):
        persona = Persona(f"Test User {word}", f"user.{word.lower()}@{SYNTHETIC_DOMAIN}")
        user = build_user(
            users[uid],
            people=people,
            persona=persona,
            user_id=uid,
            n_entries=args.fixture_entries,
            n_queries=args.fixture_queries,
            **bounds,
        )
        lines.append(json.dumps(user, ensure_ascii=False))
    fixtures_text = "\n".join(lines) + "\n"
    check_clean(fixtures_text, people, str(args.fixtures_out))

    for path, text in ((args.demo_out, demo_text), (args.fixtures_out, fixtures_text)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(text.encode('utf-8'))} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
