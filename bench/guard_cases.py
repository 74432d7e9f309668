"""The guard benchmark's original positive cases and its negatives: sensitive spans in commit-body
sentences, one category per way a span is written (`CATEGORIES`), from synthetic identities only
(made-up first and last names, addresses at example.* and .invalid, card numbers with valid
checksums on test ranges, IBANs with valid check digits on made-up accounts); and the ordinary
sentences of the dev data's real commit bodies (`ordinary_sentences`). `bench.guard_recall` scores
the guard on them; `bench.guard_cases_adversarial` is the separately written adversarial set."""

from __future__ import annotations

import base64
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specsteer.privacy.pii import luhn_ok

FIRST = str.split(
    "Anneliese Bartholomew Casimir Delphine Evander Fionnuala Gwendolyn Horatio Isolde Jerome Kasimira Leopold "
    "Marisol Norberto Ottilie Perpetua Quillon Rosalind Sebastiane Theodora Ulrika Valentijn Wilhelmina Xaviera "
    "Yolanthe Zebulon Ambrosia Benedikt Clementine Dorotea"
)
LAST = str.split(
    "Abernathy Brightwater Castellano Drummondson Eckhardtsen Fairweather Galbraithe Hollingsworth Ingersoll "
    "Jankowiczek Kettleborough Lindqvistor Montgomerie Nakashimura Oyelaranwe Pemberton Quarrington Rasmussenova "
    "Strathmoreau Thistlewood Underhillson Vasquezmora Whitcombe Yarborough Zelenkovic"
)
DOMAINS = ("example.com", "example.org", "example.net", "mail.example.com", "example.invalid", "lists.example.org")
TEMPLATES = (
    "Thanks to {x} for the careful review of the first round.",
    "The crash was first reported by {x} on the mailing list.",
    "If the test still fails on your machine, contact {x} with the trace.",
    "This reproduces the setup that {x} described in the bug report.",
    "Noticed-while-testing: the reproducer from {x} now passes.",
    "We keep the old behaviour for now; {x} asked for it in the discussion.",
    "The original patch came from {x}, and this version only rebases it.",
    "Ask {x} before changing the default again.",
    "Without this fix the helper sends {x} to the remote in the clear.",
    "Keep {x} out of the logs, as the earlier commit did for the token.",
)


@dataclass(frozen=True)
class Sample:
    category: str
    text: str
    spans: tuple[tuple[int, int], ...]  # character ranges that must not go up
    profile: int


@dataclass(frozen=True)
class Person:
    first: str
    last: str
    email: str
    secret: str

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"

    @property
    def canary(self) -> str:
        return f"my PIN is {self.secret}"


def people(rng: random.Random, n: int) -> list[Person]:
    firsts = rng.sample(FIRST, n)
    lasts = rng.sample(LAST, n)
    return [
        Person(
            f,
            la,
            f"{f.lower()}.{la.lower()}@{rng.choice(DOMAINS)}",
            "".join(rng.choice("0123456789") for _ in range(6)),
        )
        for f, la in zip(firsts, lasts, strict=True)
    ]


# -- span generators: each returns the sensitive text for one person --------------------------------


def _local(rng: random.Random) -> tuple[str, str]:
    f, la = rng.choice(FIRST).lower(), rng.choice(LAST).lower()
    return rng.choice([(f, la), (f[0], la), (f, la + str(rng.randint(1, 99)))])


def email_plain(rng: random.Random, p: Person) -> str:
    a, b = _local(rng)
    return f"{a}{rng.choice('._')}{b}@{rng.choice(DOMAINS)}"


def email_words(rng: random.Random, p: Person) -> str:
    a, b = _local(rng)
    dom = rng.choice(DOMAINS).replace(".", " dot ")
    return rng.choice([f"{a} dot {b} at {dom}", f"{a}.{b} at {dom}", f"{a} dot {b} AT {dom.upper()}"])


def email_brackets(rng: random.Random, p: Person) -> str:
    a, b = _local(rng)
    at = rng.choice(["[at]", "(at)", "{at}", " [at] ", " (at) ", " [AT] "])
    dot = rng.choice([".", " [dot] ", "(dot)", " dot "])
    return f"{a}.{b}{at}{rng.choice(DOMAINS).replace('.', dot)}"


def email_spaced_at(rng: random.Random, p: Person) -> str:
    a, b = _local(rng)
    return f"{a}.{b}{rng.choice([' @ ', ' @', '@ ', '  @  '])}{rng.choice(DOMAINS)}"


def email_mailto_plus(rng: random.Random, p: Person) -> str:
    a, b = _local(rng)
    tag = rng.choice(["git", "lists", "spam", "review2024", "x"])
    addr = f"{a}.{b}+{tag}@{rng.choice(DOMAINS)}"
    return rng.choice([addr, f"mailto:{a}.{b}@{rng.choice(DOMAINS)}", f"mailto:{addr}"])


def _d(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def phone_fr(rng: random.Random, p: Person) -> str:
    pairs = [f"0{rng.choice('1234567')}"] + [_d(rng, 2) for _ in range(4)]
    sep = rng.choice([" ", ".", "-", ""])
    if rng.random() < 0.3:
        return "+33 " + pairs[0][1] + " " + " ".join(pairs[1:])
    return sep.join(pairs)


def phone_de(rng: random.Random, p: Person) -> str:
    area = rng.choice(["030", "089", "040", "0221", "0171", "0151", "0711"])
    local = _d(rng, 11 - len(area))
    form = rng.choice(["slash", "space", "intl", "dash", "slashgroups"])
    if form == "slash":
        return f"{area}/{local}"
    if form == "slashgroups":
        return f"{area}/{local[:3]} {local[3:5]} {local[5:]}"
    if form == "space":
        return f"{area} {local}"
    if form == "dash":
        return f"{area}-{local}"
    return f"+49 {area[1:]} {local}"


def phone_uk(rng: random.Random, p: Person) -> str:
    form = rng.choice(["london", "mobile", "intl", "mobile_intl"])
    if form == "london":
        return f"020 {_d(rng, 4)} {_d(rng, 4)}"
    if form == "mobile":
        return f"07{_d(rng, 3)} {_d(rng, 6)}"
    if form == "intl":
        return f"+44 20 {_d(rng, 4)} {_d(rng, 4)}"
    return f"+44 7{_d(rng, 3)} {_d(rng, 6)}"


def phone_us(rng: random.Random, p: Person) -> str:
    a, b, c = f"{rng.randint(2, 9)}{_d(rng, 2)}", f"{rng.randint(2, 9)}{_d(rng, 2)}", _d(rng, 4)
    return rng.choice([f"({a}) {b}-{c}", f"{a}-{b}-{c}", f"{a}.{b}.{c}", f"+1 {a} {b} {c}", f"1-{a}-{b}-{c}"])


def phone_other(rng: random.Random, p: Person) -> str:
    return rng.choice(
        [
            f"06-{_d(rng, 8)}",  # Netherlands mobile
            f"+31 6 {_d(rng, 8)}",
            f"0{rng.randint(21, 91)} {_d(rng, 3)} {_d(rng, 2)} {_d(rng, 2)}",  # Switzerland
            f"+41 {rng.randint(21, 79)} {_d(rng, 3)} {_d(rng, 2)} {_d(rng, 2)}",
            f"03-{_d(rng, 4)}-{_d(rng, 4)}",  # Japan
            f"+81 90-{_d(rng, 4)}-{_d(rng, 4)}",
            f"6{_d(rng, 2)} {_d(rng, 2)} {_d(rng, 2)} {_d(rng, 2)}",  # Spain
            f"+34 6{_d(rng, 2)} {_d(rng, 3)} {_d(rng, 3)}",
            f"02 {_d(rng, 4)} {_d(rng, 4)}",  # Italy
            f"+39 3{_d(rng, 2)} {_d(rng, 3)} {_d(rng, 4)}",
            f"+91 9{_d(rng, 4)} {_d(rng, 5)}",  # India
            f"0043 1 {_d(rng, 7)}",  # Austria, 00 prefix
        ]
    )


def _iban(rng: random.Random) -> str:
    country, length = rng.choice([("DE", 22), ("FR", 27), ("GB", 22), ("NL", 18), ("ES", 24), ("IT", 27), ("CH", 21)])
    if country in ("GB", "NL"):
        bban = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4)) + _d(rng, length - 8)
    elif country == "IT":
        bban = rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") + _d(rng, length - 5)
    else:
        bban = _d(rng, length - 4)
    num = int("".join(str(int(c, 36)) for c in bban + country + "00"))
    compact = f"{country}{98 - num % 97:02d}{bban}"
    return compact if rng.random() < 0.3 else " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))


def iban_upper(rng: random.Random, p: Person) -> str:
    return _iban(rng)


def iban_lower(rng: random.Random, p: Person) -> str:
    return _iban(rng).lower()


def _card(rng: random.Random) -> str:
    prefix = rng.choice(["4", "51", "55", "2221", "4539", "6011"])
    body = prefix + _d(rng, 15 - len(prefix))
    check = next(str(c) for c in range(10) if luhn_ok(body + str(c)))
    return body + check


def card_spaces(rng: random.Random, p: Person) -> str:
    c = _card(rng)
    return rng.choice([" ", "-"]).join(c[i : i + 4] for i in range(0, 16, 4))


def card_linebreak(rng: random.Random, p: Person) -> str:
    c = _card(rng)
    cut = rng.choice([4, 8, 12]) if rng.random() < 0.6 else rng.randint(5, 11)
    if cut % 4 == 0 and rng.random() < 0.5:
        groups = [c[i : i + 4] for i in range(0, 16, 4)]
        k = cut // 4
        return " ".join(groups[:k]) + "\n" + " ".join(groups[k:])
    return c[:cut] + "\n" + c[cut:]


STREETS = ("Larkspur", "Quillfeather", "Marrowgate", "Ebonwick", "Thornbury", "Cobblestone", "Willowmere", "Ashgrove")


def address(rng: random.Random, p: Person) -> str:
    s = rng.choice(STREETS)
    return rng.choice(
        [
            f"{rng.randint(1, 999)} {s} Street",
            f"{rng.randint(1, 999)}{rng.choice(['', 'B'])} {s} {rng.choice(['Road', 'Avenue', 'Lane', 'Drive'])}",
            f"{rng.randint(1, 2999)} {s} Ave NW, Springfield, IL {_d(rng, 5)}",
            f"{rng.randint(1, 99)} rue du {s}, {_d(rng, 5)} Paris",
            f"{rng.randint(1, 99)} avenue de la {s}",
            f"{s}straße {rng.randint(1, 120)}, {_d(rng, 5)} Berlin",
            f"{s}weg {rng.randint(1, 60)}",
            f"Via {s} {rng.randint(1, 200)}",
            f"Calle {s} {rng.randint(1, 200)}, {_d(rng, 5)} Madrid",
            f"Flat 3, {rng.randint(1, 99)} {s} Close",
        ]
    )


def name_variant(rng: random.Random, p: Person) -> str:
    return rng.choice(
        [p.name, f"{p.last}, {p.first}", f"{p.first[0]}. {p.last}", p.first, p.name.upper(), f"{p.last} {p.first}"]
    )


def canary_secret(rng: random.Random, p: Person) -> str:
    s = p.secret
    return rng.choice(
        [s, " ".join(s), "-".join(s), f"{s[:2]} {s[2:4]} {s[4:]}", f"{s[:3]}-{s[3:]}", ".".join(s), "  ".join(s)]
    )


def encoded_secret(rng: random.Random, p: Person) -> str:
    data = rng.choice([p.canary, p.secret, p.email, p.name, f"pin={p.secret}", f"user {p.email}"]).encode()
    form = rng.choice(["b64", "b64url", "hex", "HEX"])
    if form == "b64":
        return base64.b64encode(data).decode()
    if form == "b64url":
        return base64.urlsafe_b64encode(data).decode().rstrip("=")
    return data.hex() if form == "hex" else data.hex().upper()


_HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і", "j": "ј", "s": "ѕ"}


def confusable(rng: random.Random, p: Person) -> str:
    base = rng.choice([p.email, p.name, email_plain(rng, p), phone_fr(rng, p), p.secret, card_spaces(rng, p)])
    form = rng.choice(["homoglyph", "fullwidth", "zerowidth", "mixed"])
    if form == "fullwidth":
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in base)
    if form == "zerowidth":
        return "\u200b".join(base[i : i + 3] for i in range(0, len(base), 3))
    out = "".join(_HOMOGLYPHS.get(c, c) if rng.random() < 0.6 else c for c in base)
    if form == "mixed":
        out = "".join(chr(ord(c) + 0xFEE0) if c.isdigit() and rng.random() < 0.5 else c for c in out)
    return out


CATEGORIES: dict[str, Callable[[random.Random, Person], str]] = {
    "email: plain": email_plain,
    "email: 'dot'/'at' in words": email_words,
    "email: [at] (at) {at}": email_brackets,
    "email: ' @ '": email_spaced_at,
    "email: mailto:, plus-addressing": email_mailto_plus,
    "phone: France": phone_fr,
    "phone: Germany (incl. slash)": phone_de,
    "phone: UK": phone_uk,
    "phone: North America": phone_us,
    "phone: NL, CH, JP, ES, IT, IN, AT": phone_other,
    "IBAN: upper case": iban_upper,
    "IBAN: lower case": iban_lower,
    "card: spaces or hyphens": card_spaces,
    "card: line break": card_linebreak,
    "street address": address,
    "profile name: variants": name_variant,
    "canary secret: no template, spaced": canary_secret,
    "registered secret: base64 / hex": encoded_secret,
    "confusables, full width, zero width": confusable,
}


def positives(rng: random.Random, persons: list[Person], per_category: int) -> list[Sample]:
    out = []
    for category, make in CATEGORIES.items():
        for _ in range(per_category):
            i = rng.randrange(len(persons))
            x = make(rng, persons[i])
            template = rng.choice(TEMPLATES)
            start = template.index("{x}")
            text = template.replace("{x}", x)
            # "mailto:" says how the address is used; the address is the personal part.
            skip = len("mailto:") if x.startswith("mailto:") else 0
            out.append(Sample(category, text, ((start + skip, start + len(x)),), i))
    return out


# -- ordinary text ------------------------------------------------------------------------------

_TRAILER_LINE = re.compile(r"^\s*[A-Za-z][A-Za-z-]+:\s.*(?:<[^>]*@[^>]*>|\bby\b)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])|\n\s*\n")


def sentences(body: str) -> list[str]:
    """A commit body's sentences, without trailer lines; whitespace inside a sentence collapsed."""
    lines = [line for line in body.splitlines() if not _TRAILER_LINE.match(line)]
    parts = _SENTENCE_END.split("\n".join(lines))
    return [" ".join(p.split()) for p in parts if len(p.split()) >= 4]


def ordinary_sentences(users: list[dict[str, Any]], count: int, rng: random.Random) -> list[str]:
    """Sentences of the users' query targets, minus any with an "@" or a trailer name in it."""
    names = set()
    for u in users:
        for e in u["profile"]:
            for t in e.get("trailers", []):
                m = re.match(r"[^:]+:\s*([^<]+)", t)
                if m:
                    names.update(w for w in m.group(1).split() if len(w) > 2 and w[0].isupper())
    pool = []
    for u in users:
        for q in u["queries"]:
            for s in sentences(q["target"]):
                if "@" not in s and not (set(re.findall(r"[A-Z][a-z]+", s)) & names):
                    pool.append(s)
    pool = sorted(set(pool))
    rng.shuffle(pool)
    return pool[:count]
