"""Adversarial cases for the egress guard, written from descriptions of how a leak looks, not from
how the detectors match (issue 30, item 2).

This module imports nothing of the guard's. It was written before the detectors it measures were
changed and is not tuned to them afterwards: a case the guard misses is a finding, not a bug here.

Three things come out of a seed:

* `personas`: synthetic users whose commit history carries the secrets a developer really leaks
  into it (a database password, a cloud key pair, a bot token), their name and address in a
  trailer, and a registered PIN canary ("my PIN is ...");
* `positives`: sentences that carry one sensitive span (or a span split in parts), in categories
  that each name one way of writing it (see `CATEGORIES`); every span is marked by character range;
* `developer_text`: ordinary sentences a developer writes about code (commit hashes, UUIDs, git
  remotes, version strings, documentation URLs, identifiers, addresses in memory, ...), none of
  which is personal or secret: the false-positive side.

Everything is synthetic: made-up names, addresses at example.* and .invalid, card numbers and
IBAN-like numbers with valid checksums on made-up digits, vendor keys with random bodies.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CATEGORIES", "DEVELOPER_KINDS", "AdversarialCase", "Persona", "developer_text", "personas", "positives"]

FIRST = ("Maelis", "Torvald", "Henrike", "Oisin", "Priyanka", "Lucan", "Saoirse", "Baptiste", "Ingrid", "Tadeo")
LAST = ("Vanterpool", "Okonkwo", "Halvorsen", "Quenneville", "Radcliffe", "Szymanska", "Delacroix", "Fenwick")
DOMAINS = ("example.com", "example.org", "example.net", "corp.example.com", "example.invalid")
TOWNS = ("Springfield", "Riverton", "Fairview", "Kingsbridge", "Ashford", "Millbrook", "Oakhaven", "Westerly")
STREETS = ("Marrowgate", "Larchmont", "Peabody", "Kestrel", "Quayside", "Hollyhock", "Brambling", "Saltmarsh")
SUFFIXES = ("Close", "Road", "Street", "Lane", "Avenue", "Crescent", "Drive", "Terrace")
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
PUNCT = "!#$%&*+-=?@^_~."


@dataclass(frozen=True)
class Persona:
    """A synthetic user: what the history holds, what is registered, and who they are."""

    name: str
    email: str
    pin: str  # registered as the canary "my PIN is <pin>"
    password: str  # in the history, unregistered
    cloud_key_id: str  # in the history, unregistered
    cloud_secret: str  # in the history, unregistered
    token: str  # in the history, unregistered
    history: tuple[str, ...]  # commit bodies that carry the secrets above

    @property
    def canary(self) -> str:
        return f"my PIN is {self.pin}"

    @property
    def trailer(self) -> str:
        return f"Signed-off-by: {self.name} <{self.email}>"


@dataclass(frozen=True)
class AdversarialCase:
    category: str
    text: str
    spans: tuple[tuple[int, int], ...]  # character ranges none of whose tokens may go up
    persona: int


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _password(rng: random.Random) -> str:
    if rng.random() < 0.25:  # a passphrase: words and a number, which people also use
        words = rng.sample(["otter", "kettle", "plum", "granite", "velvet", "harbor", "comet", "tundra"], 3)
        return "-".join(w.capitalize() for w in words) + str(rng.randint(10, 99))
    n = rng.randint(11, 16)
    core = [rng.choice(string.ascii_lowercase), rng.choice(string.ascii_uppercase), rng.choice(string.digits)]
    core += [rng.choice(PUNCT)] + [rng.choice(ALNUM + PUNCT) for _ in range(n - 4)]
    rng.shuffle(core)
    return "".join(core)


def _token(rng: random.Random) -> str:
    return rng.choice(
        [
            "ghp_" + _rand(rng, ALNUM, 36),
            "glpat-" + _rand(rng, ALNUM + "-_", 20),
            "xoxb-" + _rand(rng, string.digits, 12) + "-" + _rand(rng, string.digits, 13) + "-" + _rand(rng, ALNUM, 24),
            _rand(rng, "0123456789abcdef", 32),
            _rand(rng, ALNUM, 40),
        ]
    )


def personas(rng: random.Random, n: int) -> list[Persona]:
    out = []
    firsts, lasts = rng.sample(FIRST, n), rng.sample(LAST, n)
    for first, last in zip(firsts, lasts, strict=True):
        email = f"{first.lower()}.{last.lower()}@{rng.choice(DOMAINS)}"
        password, token = _password(rng), _token(rng)
        key_id = "AKIA" + _rand(rng, string.ascii_uppercase + "234567", 16)
        secret = _rand(rng, B64, 40)
        history = (
            "Add the staging deploy script.\n\nFor now it reads the database settings from .env:\n\n"
            f"  DB_USER=deploy\n  DB_PASSWORD={password}\n\nRotate it after the demo.",
            "Configure the nightly upload.\n\nThe uploader uses the shared profile:\n\n  [default]\n"
            f"  aws_access_key_id = {key_id}\n  aws_secret_access_key = {secret}\n  region = eu-west-1",
            f"Use the bot token {token} for the release-notes job until the app is approved.",
            "Fix the retry loop so that it gives up after five attempts instead of spinning forever.",
        )
        out.append(
            Persona(
                f"{first} {last}",
                email,
                _rand(rng, string.digits, rng.choice([4, 6, 8])),
                password,
                key_id,
                secret,
                token,
                history,
            )
        )
    return out


# -- span writers: each returns (text, spans) for a persona ---------------------------------------

Written = tuple[str, tuple[tuple[int, int], ...]]

SENTENCES = (
    "Thanks for the review; I put {x} in the notes by mistake.",
    "The reproducer in the bug report used {x} and still fails.",
    "Please do not paste {x} into the public channel again.",
    "Before this change the helper logged {x} on every retry.",
    "As discussed in the thread, {x} stays out of the changelog.",
    "Found while testing: {x} showed up in the debug output.",
    "The old script printed {x} when the request failed.",
    "Keep {x} away from the trace, like the previous fix did.",
)


def _in_sentence(rng: random.Random, x: str) -> Written:
    template = rng.choice(SENTENCES)
    start = template.index("{x}")
    return template.replace("{x}", x), ((start, start + len(x)),)


def _address(rng: random.Random) -> str:
    return f"{rng.choice(FIRST).lower()}{rng.choice(['.', '_', ''])}{rng.choice(LAST).lower()}@{rng.choice(DOMAINS)}"


def email_spaced_out(rng: random.Random, p: Persona) -> Written:
    addr = p.email if rng.random() < 0.5 else _address(rng)
    sep = "  " if rng.random() < 0.2 else " "
    return _in_sentence(rng, sep.join(addr))


def _digits(rng: random.Random, n: int) -> str:
    return _rand(rng, string.digits, n)


def phone_country_code_in_parens(rng: random.Random, p: Persona) -> Written:
    number = rng.choice(
        [
            f"(+44) 20 {_digits(rng, 4)} {_digits(rng, 4)}",
            f"(+44) 7{_digits(rng, 3)} {_digits(rng, 6)}",
            f"(+33) {rng.choice('1234567')} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)}",
            f"(+49) {rng.choice(['30', '89', '40', '171', '151'])} {_digits(rng, 7)}",
            f"(+1) {rng.randint(201, 989)}-{rng.randint(201, 989)}-{_digits(rng, 4)}",
            f"(+1) ({rng.randint(201, 989)}) {rng.randint(201, 989)} {_digits(rng, 4)}",
            f"(+81) 90-{_digits(rng, 4)}-{_digits(rng, 4)}",
            f"(+34) 6{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 3)}",
            f"+(31) 6 {_digits(rng, 4)} {_digits(rng, 4)}",
            f"(0044) 7{_digits(rng, 3)} {_digits(rng, 6)}",
            f"(+353) 87 {_digits(rng, 3)} {_digits(rng, 4)}",
            f"(+39) 3{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 4)}",
        ]
    )
    return _in_sentence(rng, number)


def phone_broken_by_a_line(rng: random.Random, p: Persona) -> Written:
    groups = rng.choice(
        [
            ["+44", "20", _digits(rng, 4), _digits(rng, 4)],
            ["06", _digits(rng, 2), _digits(rng, 2), _digits(rng, 2), _digits(rng, 2)],
            [f"({rng.randint(201, 989)})", f"{rng.randint(201, 989)}-{_digits(rng, 4)}"],
            ["030", _digits(rng, 4), _digits(rng, 4)],
            ["+1", str(rng.randint(201, 989)), str(rng.randint(201, 989)), _digits(rng, 4)],
            ["07" + _digits(rng, 3), _digits(rng, 3), _digits(rng, 3)],
            ["+49", "171", _digits(rng, 3), _digits(rng, 4)],
        ]
    )
    cut = rng.randint(1, len(groups) - 1)
    number = " ".join(groups[:cut]) + rng.choice(["\n", "\n  ", " \n"]) + " ".join(groups[cut:])
    lead = rng.choice(["Call me on", "My number is", "Reach the on-call phone at", "Text"])
    text = f"{lead} {number} if the build breaks again."
    start = len(lead) + 1
    return text, ((start, start + len(number)),)


def _luhn_complete(body: str) -> str:
    for c in string.digits:
        total = 0
        for i, ch in enumerate(reversed(body + c)):
            d = int(ch) * (2 if i % 2 else 1)
            total += d - 9 if d > 9 else d
        if total % 10 == 0:
            return body + c
    raise AssertionError("unreachable")


def card_with_dots(rng: random.Random, p: Persona) -> Written:
    if rng.random() < 0.2:
        card = _luhn_complete(rng.choice(["34", "37"]) + _digits(rng, 12))
        groups = [card[:4], card[4:10], card[10:]]
    else:
        prefix = rng.choice(["4", "51", "53", "55", "2223", "6011", "4916"])
        card = _luhn_complete(prefix + _digits(rng, 15 - len(prefix)))
        groups = [card[i : i + 4] for i in range(0, 16, 4)]
    return _in_sentence(rng, rng.choice([".", ".", ". "]).join(groups))


def address_with_flat_and_town(rng: random.Random, p: Persona) -> Written:
    street = f"{rng.randint(1, 240)} {rng.choice(STREETS)} {rng.choice(SUFFIXES)}"
    town = rng.choice(TOWNS)
    form = rng.choice(
        [
            f"Flat {rng.randint(1, 40)}, {street}, {town}",
            f"Apt {rng.randint(1, 30)}{rng.choice('ABCD')}, {street}, {town}",
            f"Unit {rng.randint(1, 90)}, {street}, {town}",
            f"Suite {rng.randint(100, 900)}, {street}, {town}, OR {_digits(rng, 5)}",
            f"Flat {rng.randint(1, 9)}, {street}, {town} {rng.choice('ABCDEFGHKLMNPRSTW')}{rng.randint(1, 20)} "
            f"{rng.randint(1, 9)}{rng.choice('ABDEFGHJLNPQRSTUWXYZ')}{rng.choice('ABDEFGHJLNPQRSTUWXYZ')}",
            f"{street}, {town}",
        ]
    )
    return text_with(rng, "My new address is {x}, in case the parcel comes back.", form)


def text_with(rng: random.Random, template: str, x: str) -> Written:
    start = template.index("{x}")
    return template.replace("{x}", x), ((start, start + len(x)),)


def history_password(rng: random.Random, p: Persona) -> Written:
    return text_with(
        rng,
        rng.choice(
            [
                "The login for the test database is {x} now.",
                "I logged in with {x} and the migration ran.",
                "Use {x} when the installer asks for a password.",
                "The admin password {x} is only for the sandbox.",
            ]
        ),
        p.password,
    )


def history_cloud_key_third(rng: random.Random, p: Persona) -> Written:
    n = len(p.cloud_secret) // 3 + rng.randint(-1, 1)
    start = rng.choice([0, 0, rng.randint(1, len(p.cloud_secret) - n)])
    return text_with(
        rng,
        rng.choice(["The secret key starts with {x} if that helps.", "Part of the key: {x}"]),
        p.cloud_secret[start : start + n],
    )


def _jwt(rng: random.Random) -> str:
    def b64url(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")

    header = {"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"}
    if rng.random() < 0.4:
        header["kid"] = _rand(rng, ALNUM, 12)
    payload = {
        "sub": _digits(rng, 10),
        "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        "iat": 1_700_000_000 + rng.randint(0, 10**7),
    }
    if rng.random() < 0.5:
        payload["email"] = _address(rng)
    signature = base64.urlsafe_b64encode(rng.randbytes(rng.choice([32, 64]))).decode().rstrip("=")
    return f"{b64url(header)}.{b64url(payload)}.{signature}"


def vendor_key(rng: random.Random, p: Persona) -> Written:
    key = rng.choice(
        [
            "AKIA" + _rand(rng, string.ascii_uppercase + "234567", 16),
            "ghp_" + _rand(rng, ALNUM, 36),
            "github_pat_" + _rand(rng, ALNUM, 22) + "_" + _rand(rng, ALNUM, 59),
            "sk-" + _rand(rng, ALNUM, 48),
            "sk-proj-" + _rand(rng, B64URL, 64),
            "xoxp-"
            + _digits(rng, 11)
            + "-"
            + _digits(rng, 12)
            + "-"
            + _digits(rng, 13)
            + "-"
            + _rand(rng, "0123456789abcdef", 32),
            "sk_live_" + _rand(rng, ALNUM, 24),
            "AIza" + _rand(rng, B64URL, 35),
            "SG." + _rand(rng, B64URL, 22) + "." + _rand(rng, B64URL, 43),
            "npm_" + _rand(rng, ALNUM, 36),
            _jwt(rng),
        ]
    )
    return _in_sentence(rng, key)


def jwt_about_a_third(rng: random.Random, p: Persona) -> Written:
    jwt = _jwt(rng)
    n = round(len(jwt) * rng.uniform(0.25, 0.35))
    start = 0 if rng.random() < 0.6 else rng.randint(1, len(jwt) - n)
    return text_with(
        rng,
        rng.choice(["The header was Authorization: Bearer {x}", "Decoding {x} gave the claims."]),
        jwt[start : start + n],
    )


def history_token_encoded(rng: random.Random, p: Persona) -> Written:
    form = rng.choice(["b64", "b64url", "basic", "hex"])
    if form == "basic":
        x = base64.b64encode(f"{p.name.split()[0].lower()}:{p.token}".encode()).decode()
        return text_with(rng, "The request carried Authorization: Basic {x} and was rejected.", x)
    raw = p.token.encode()
    if form == "hex":
        x = raw.hex()
    elif form == "b64url":
        x = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    else:
        x = base64.b64encode(raw).decode()
    return _in_sentence(rng, x)


SCRIPT_ZEROS = (0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0x0AE6, 0x0BE6, 0x1040, 0xFF10, 0x1D7CE)


def pin_other_script(rng: random.Random, p: Persona) -> Written:
    zero = rng.choice(SCRIPT_ZEROS)
    digits = "".join(chr(zero + int(d)) for d in p.pin)
    if rng.random() < 0.3:
        digits = " ".join(digits)
    return text_with(
        rng, rng.choice(["The code is {x}, don't share it.", "Door code: {x}", "I typed {x} at the terminal."]), digits
    )


def history_secret_split(rng: random.Random, p: Persona) -> Written:
    secret = rng.choice([p.password, p.token, p.cloud_secret])
    cut = rng.randint(len(secret) // 3, 2 * len(secret) // 3)
    a, b = secret[:cut], secret[cut:]
    middle = rng.choice(
        [" and then, after the dash, ", "; the rest is ", " (first part) ... second part: ", "\nthen\n"]
    )
    lead = rng.choice(["Write down", "Note", "Split for the chat:"])
    text = f"{lead} {a}{middle}{b} please."
    s1 = len(lead) + 1
    s2 = s1 + len(a) + len(middle)
    return text, ((s1, s1 + len(a)), (s2, s2 + len(b)))


def split_across_a_line(rng: random.Random, p: Persona) -> Written:
    x = rng.choice([p.email, _address(rng), p.token, p.cloud_key_id, p.cloud_secret])
    cut = rng.randint(3, len(x) - 3)
    wrapped = x[:cut] + "\n" + x[cut:]
    return _in_sentence(rng, wrapped)


def private_key_block(rng: random.Random, p: Persona) -> Written:
    kind = rng.choice(["RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY"])
    raw = rng.randbytes(rng.choice([96, 144, 192]))
    if kind == "OPENSSH PRIVATE KEY":
        raw = b"openssh-key-v1\x00" + raw
    elif kind == "RSA PRIVATE KEY":
        raw = b"\x30\x82\x04\xa4\x02\x01\x00" + raw
    body = base64.b64encode(raw).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    head = f"Oops, the fixture had\n-----BEGIN {kind}-----\n"
    text = f"{head}{lines}\n-----END {kind}-----\nin it."
    return text, ((len(head), len(head) + len(lines)),)


def national_id(rng: random.Random, p: Persona) -> Written:
    form = rng.choice(["ssn", "nino", "dni", "bsn", "nir", "sin"])
    if form == "ssn":
        area = rng.choice([n for n in range(1, 900) if n != 666])
        x = f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
    elif form == "nino":
        letters = "ABCEGHJKLMNPRSTWXYZ"
        pairs = " ".join(_digits(rng, 2) for _ in range(3))
        x = f"{rng.choice(letters)}{rng.choice(letters)} {pairs} {rng.choice('ABCD')}"
    elif form == "dni":
        n = rng.randint(10_000_000, 99_999_999)
        x = f"{n}{'TRWAGMYFPDXBNJZSQVHLCKE'[n % 23]}"
    elif form == "bsn":
        while True:
            d = [rng.randint(0, 9) for _ in range(8)]
            s = sum(w * v for w, v in zip(range(9, 1, -1), d, strict=True))
            last = s % 11
            if last < 10 and d[0] != 0:
                x = "".join(map(str, d)) + str(last)
                break
    elif form == "nir":
        born = f"{rng.choice('12')}{rng.randint(50, 99):02d}{rng.randint(1, 12):02d}"
        base = f"{born}{rng.randint(1, 95):02d}{_digits(rng, 3)}{_digits(rng, 3)}"
        x = f"{base}{97 - int(base) % 97:02d}"
    else:
        x = _luhn_complete(str(rng.randint(1, 7)) + _digits(rng, 7))
        x = f"{x[:3]} {x[3:6]} {x[6:]}"
    return text_with(
        rng,
        rng.choice(["My social security number is {x}.", "ID on the form: {x}", "The HR system shows {x} for me."]),
        x,
    )


def credentials_in_url(rng: random.Random, p: Persona) -> Written:
    user = rng.choice(["deploy", "admin", p.name.split()[0].lower(), "ci"])
    secret = rng.choice([_password(rng), _rand(rng, ALNUM, 20), p.password])
    host = rng.choice(["git.example.com/team/app.git", "db.example.internal:5432/prod", "cache.example.net:6379/0"])
    scheme = rng.choice(["https", "postgres", "redis", "mysql"])
    url = f"{scheme}://{user}:{secret}@{host}"
    lead = "The CI log printed "
    start = len(lead) + len(scheme) + 3 + len(user) + 1
    return f"{lead}{url} in full.", ((start, start + len(secret)),)


def keyword_secret(rng: random.Random, p: Persona) -> Written:
    value = rng.choice([_password(rng), _rand(rng, ALNUM, rng.randint(20, 40)), _rand(rng, "0123456789abcdef", 32)])
    form = rng.choice(
        [
            'DB_PASSWORD="{x}"',
            "api_key: {x}",
            "SECRET_KEY = '{x}'",
            '"client_secret": "{x}"',
            "export API_TOKEN={x}",
            "--password {x}",
            "password={x}",
        ]
    )
    start = form.index("{x}")
    line = form.replace("{x}", value)
    lead = "The config snippet in the report was "
    return f"{lead}{line} and should be redacted.", ((len(lead) + start, len(lead) + start + len(value)),)


CATEGORIES: dict[str, Callable[[random.Random, Persona], Written]] = {
    "email: every character spaced": email_spaced_out,
    "phone: country code in parentheses": phone_country_code_in_parens,
    "phone: broken by a line break": phone_broken_by_a_line,
    "card: dots": card_with_dots,
    "address: flat before, town after": address_with_flat_and_town,
    "history: password copied": history_password,
    "history: a third of the cloud secret": history_cloud_key_third,
    "vendor key in full": vendor_key,
    "JWT: about 30 %": jwt_about_a_third,
    "history: token in base64 / hex": history_token_encoded,
    "PIN in another script's digits": pin_other_script,
    "history: secret split in two": history_secret_split,
    "split across a line": split_across_a_line,
    "private key block": private_key_block,
    "national identifier": national_id,
    "credentials in a URL": credentials_in_url,
    "keyword secret, unregistered": keyword_secret,
}


def positives(rng: random.Random, people: list[Persona], per_category: int) -> list[AdversarialCase]:
    out = []
    for category, write in CATEGORIES.items():
        for _ in range(per_category):
            i = rng.randrange(len(people))
            text, spans = write(rng, people[i])
            out.append(AdversarialCase(category, text, spans, i))
    return out


# -- ordinary developer text ----------------------------------------------------------------------

DEV_SENTENCES = (
    "Bump the pinned revision to {x} so the CI picks up the fix.",
    "See {x} for the background of this change.",
    "This reverts part of {x}, which broke the Windows build.",
    "The failing job referenced {x} in its log.",
    "Tested against {x} on Linux and macOS.",
    "Rename the helper; {x} is what callers expect now.",
    "The benchmark ran on {x} with the default settings.",
    "Document {x} in the migration notes.",
)


def _hex(rng: random.Random, n: int) -> str:
    return _rand(rng, "0123456789abcdef", n)


def _clock(rng: random.Random) -> str:
    return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


def _camel(rng: random.Random) -> str:
    parts = ["Abstract", "Request", "Handler", "Factory", "Bean", "Proxy", "Context", "Manager", "Stream", "Buffer"]
    return "".join(rng.sample(parts, rng.randint(2, 5)))


DEVELOPER_KINDS: dict[str, Callable[[random.Random], str]] = {
    "commit hash": lambda r: _hex(r, 40),
    "short hash": lambda r: _hex(r, r.randint(7, 12)),
    "SHA-256": lambda r: r.choice(["", "sha256:"]) + _hex(r, 64),
    "UUID": lambda r: f"{_hex(r, 8)}-{_hex(r, 4)}-4{_hex(r, 3)}-{r.choice('89ab')}{_hex(r, 3)}-{_hex(r, 12)}",
    "git remote": lambda r: r.choice(
        [
            f"git@github.com:{r.choice(['git', 'torvalds', 'python'])}/{r.choice(['git', 'linux', 'cpython'])}.git",
            f"git@gitlab.com:{r.choice(['gitlab-org', 'inkscape'])}/{r.choice(['gitlab', 'inkscape'])}.git",
            "ssh://git@git.kernel.org/pub/scm/git/git.git",
            f"git@bitbucket.org:{r.choice(['atlassian', 'team'])}/{r.choice(['stash', 'tools'])}.git",
            f"https://github.com/{r.choice(['git', 'numpy', 'pallets'])}/{r.choice(['git', 'numpy', 'flask'])}.git",
        ]
    ),
    "version string": lambda r: r.choice(
        [
            f"v{r.randint(0, 9)}.{r.randint(0, 60)}.{r.randint(0, 20)}",
            f"{r.randint(1, 5)}.{r.randint(0, 30)}.{r.randint(0, 9)}-rc.{r.randint(1, 4)}",
            f"Python 3.{r.randint(8, 13)}.{r.randint(0, 9)}",
            f"gcc {r.randint(9, 14)}.{r.randint(1, 3)}.0",
            f"OpenSSL {r.randint(1, 3)}.{r.randint(0, 2)}.{r.randint(0, 15)}",
            f"{r.randint(2019, 2025)}.{r.randint(1, 12):02d}.{r.randint(1, 28):02d}",
        ]
    ),
    "documentation URL": lambda r: r.choice(
        [
            "https://docs.python.org/3/library/asyncio-task.html#asyncio.wait_for",
            "https://git-scm.com/docs/git-rev-list#Documentation/git-rev-list.txt---format",
            "https://developer.mozilla.org/en-US/docs/Web/HTTP/Headers/Authorization",
            f"https://datatracker.ietf.org/doc/html/rfc{r.randint(1000, 9999)}",
            "https://pkg.go.dev/net/http#Client",
            f"https://github.com/git/git/commit/{_hex(r, 40)}",
            f"https://learn.microsoft.com/en-us/windows/win32/debug/system-error-codes--{r.randint(0, 9)}00-999-",
            f"https://bugs.example.org/show_bug.cgi?id={r.randint(10000, 999999)}",
        ]
    ),
    "code identifier": lambda r: r.choice(
        [
            _camel(r),
            "_".join(r.sample(["parse", "commit", "buffer", "graph", "oid", "release", "free", "walk", "tree"], 3)),
            "ERR_" + "_".join(r.sample(["CONNECTION", "REFUSED", "TIMED", "OUT", "INVALID", "STATE"], 2)),
            r.choice(["os.path", "collections.abc", "concurrent.futures", "importlib.metadata"])
            + "."
            + r.choice(["join", "Mapping", "ThreadPoolExecutor", "version"]),
            r.choice(["AWS_REGION", "GITHUB_TOKEN", "SECRET_KEY_BASE", "password_hash", "api_key_env", "TOKEN_TTL"]),
            "@"
            + r.choice(["pytest.mark.parametrize", "functools.lru_cache", "dataclass", "staticmethod", "types/node"]),
        ]
    ),
    "number, address or path": lambda r: r.choice(
        [
            f"0x{_hex(r, 12)}",
            f"0x8007{_hex(r, 4)}",
            f"{r.randint(1, 65535)}",
            f"{r.randint(100, 99999)} ms",
            f"builtin/{r.choice(['log', 'commit', 'rebase'])}.c:{r.randint(10, 4000)}",
            f"127.0.0.1:{r.randint(1024, 65535)}",
            f"#{r.randint(1000, 99999)}",
            f"{r.randint(1_600_000_000, 1_800_000_000)}",
            f"/usr/lib/x86_64-linux-gnu/libssl.so.{r.randint(1, 3)}",
            f"{r.randint(1, 999)} files changed, {r.randint(1, 9999)} insertions(+)",
        ]
    ),
    "date and time": lambda r: r.choice(
        [
            f"{r.randint(2015, 2025)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{_clock(r)}Z",
            f"Tue, {r.randint(1, 28)} Mar {r.randint(2015, 2025)} {_clock(r)} +0100",
            f"{r.randint(1, 28):02d}/{r.randint(1, 12):02d}/{r.randint(2015, 2025)}",
        ]
    ),
}


def developer_text(rng: random.Random, per_kind: int) -> list[tuple[str, str]]:
    """(kind, sentence) pairs of ordinary developer text, `per_kind` of each kind."""
    out = []
    for kind, make in DEVELOPER_KINDS.items():
        for _ in range(per_kind):
            out.append((kind, rng.choice(DEV_SENTENCES).replace("{x}", make(rng))))
    return out
