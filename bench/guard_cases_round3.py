"""Round 3 of the egress guard's held-out cases (issue #49, Build 7): what a history says in prose,
special-category data, names in every script, national formats, split secrets.

Like `bench.guard_cases_adversarial` and `bench.guard_cases_identifiers`, this module imports
nothing of the guard's. It was written from the issue's descriptions of how each leak looks and
from how people write such things, before the detectors were read; the national identifiers are
generated with python-stdnum (random digits, the check character searched until stdnum's own
`is_valid` accepts the number) and the phone numbers are kept only if libphonenumber calls them
valid, so every value is well formed by the libraries' standards, not by the guard's.

* `personas`: synthetic users whose histories register, the ways a real history does, names in
  six scripts (trailers, one-word trailers, the prose of a body), secrets stated in prose (a wifi
  password, an alarm code, a four-word passphrase, a router admin password), a Slack webhook and
  a GitHub token;
* `positives`: one sentence per case, its spans marked by character range, in `CATEGORIES`;
* `developer_text`: ordinary developer text with URLs of public services, environment-variable
  names, CI YAML, pinned action references, words that special-category vocabularies also use,
  release dates next to project names, ticket and standard numbers: the false-positive side,
  against the same personas (so a registered webhook or token is in each guard's history).
"""

from __future__ import annotations

import codecs
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import phonenumbers
from stdnum.be import nn as be_nn
from stdnum.dk import cpr as dk_cpr
from stdnum.ee import ik as ee_ik
from stdnum.es import dni as es_dni
from stdnum.fi import hetu as fi_hetu
from stdnum.it import codicefiscale as it_cf
from stdnum.kr import rrn as kr_rrn
from stdnum.nl import bsn as nl_bsn
from stdnum.no import fodselsnummer as no_fnr
from stdnum.pl import pesel as pl_pesel
from stdnum.ro import cnp as ro_cnp
from stdnum.se import personnummer as se_pnr

__all__ = ["CATEGORIES", "DEVELOPER_KINDS", "Persona", "developer_text", "personas", "positives"]

Spans = tuple[tuple[int, int], ...]
Written = tuple[str, Spans]
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _fill(template: str, **values: str) -> Written:
    """`template` with {name} fields filled; the spans of every field whose name does not start with _.

    A value may mark its private core in brackets ("a practising [Muslim]"): the span is the core,
    the article or preposition around it is the sentence's (the guard cannot know it is coming)."""
    out, spans, i = [], [], 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            out.append(template[i:])
            break
        k = template.index("}", j)
        out.append(template[i:j])
        key = template[j + 1 : k]
        value = values[key]
        start = sum(map(len, out))
        a, b = (value.index("["), value.index("]") - 1) if "[" in value else (0, len(value))
        value = value.replace("[", "").replace("]", "")
        out.append(value)
        if not key.startswith("_"):
            spans.append((start + a, start + b))
        i = k + 1
    return "".join(out), tuple(spans)


# -- names: (as registered, renderings in Latin letters people write) ------------------------------

LATIN_DIACRITICS = (
    "Ewelina Krzyżanowska",
    "Björn Åkesson",
    "Zoë Lefèvre",
    "Ştefan Dumitrescu",
    "Dorottya Szőke",
    "Tomáš Dvořák",
    "Leilani Peña Ibáñez",
    "Aurélien Mercié",
    "Jürgen Weißkopf",
    "Øystein Brænne",
    "Gülşen Aydoğdu",
    "Łukasz Wróblewski",
)
# Other scripts, each with the Latin spellings a colleague would type (passport, habit, pinyin).
OTHER_SCRIPTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Cyrillic", "Анастасия Волкова", ("Anastasia Volkova", "Anastasiya Volkova")),
    ("Cyrillic", "Сергей Кузнецов", ("Sergey Kuznetsov", "Sergei Kuznetsov")),
    ("Cyrillic", "Ольга Лебедева", ("Olga Lebedeva",)),
    ("Cyrillic", "Алексей Морозов", ("Aleksey Morozov", "Alexei Morozov")),
    ("Cyrillic", "Юлия Павленко", ("Yulia Pavlenko", "Yuliya Pavlenko")),
    ("CJK", "陈志强", ("Chen Zhiqiang", "Zhiqiang Chen")),
    ("CJK", "刘美玲", ("Liu Meiling", "Meiling Liu")),
    ("CJK", "周婷婷", ("Zhou Tingting", "Tingting Zhou")),
    ("CJK", "黄国伟", ("Huang Guowei", "Guowei Huang")),
    ("Hangul", "박지훈", ("Park Ji-hoon", "Jihoon Park", "Park Jihoon")),
    ("Hangul", "이수진", ("Lee Su-jin", "Sujin Lee")),
    ("Hangul", "최민호", ("Choi Min-ho", "Minho Choi")),
    ("Hangul", "정하은", ("Jung Ha-eun", "Haeun Jung")),
    ("Arabic", "محمد القحطاني", ("Mohammed Al-Qahtani", "Muhammad al-Qahtani")),
    ("Arabic", "فاطمة الزهراني", ("Fatima Al-Zahrani", "Fatimah Alzahrani")),
    ("Arabic", "خالد المطيري", ("Khalid Al-Mutairi", "Khaled Almutairi")),
    ("Devanagari", "अंकित वर्मा", ("Ankit Verma", "Ankit Varma")),
    ("Devanagari", "प्रिया शर्मा", ("Priya Sharma",)),
    ("Devanagari", "राहुल गुप्ता", ("Rahul Gupta",)),
    ("Devanagari", "स्नेहा कुलकर्णी", ("Sneha Kulkarni",)),
)
ONE_WORD = ("陈静", "Oluwaseun", "Ayşe", "Thandiwe", "Николай", "민서", "Siobhán", "Aigerim", "Teodoro", "سلمى")
TRAILER_KEYS = ("Signed-off-by", "Co-authored-by", "Reviewed-by", "Acked-by", "Tested-by", "Helped-by")
DOMAINS = ("example.com", "example.org", "example.net", "mail.example.com")

# -- secrets as people state them in a note --------------------------------------------------------

WORDS = str.split(
    """maple orbit lantern cobalt walrus thimble cactus meadow quartz ember falcon saffron tundra
    juniper pebble harbor velvet comet anchor nectar glacier badger willow prism"""
)
PLACES = ("lake house", "cabin", "studio", "flat", "office annex", "summer house")


def _wifi(rng: random.Random) -> str:
    word = rng.choice(["Fjellbris", "Nordlys", "Kestrel", "Brisbane", "Moonpie", "Tangerine", "Oakridge"])
    return f"{word}{rng.choice(['-', '_', '', '!'])}{rng.randint(1000, 9999)}"


def _admin(rng: random.Random) -> str:
    n = rng.randint(10, 14)
    core = [rng.choice(string.ascii_uppercase), rng.choice(string.digits), rng.choice("!#%*+")]
    core += [rng.choice(ALNUM) for _ in range(n - 3)]
    rng.shuffle(core)
    return "".join(core)


@dataclass(frozen=True)
class Persona:
    """A synthetic user and the history entries (subject, body, trailers) that say who and what."""

    latin_name: str  # with diacritics
    other_names: tuple[tuple[str, str, tuple[str, ...]], ...]  # (script, as written, Latin renderings)
    one_word: tuple[str, ...]  # names that appear alone in a trailer
    wifi: str
    alarm: str
    passphrase: str
    admin: str
    webhook: str
    github_token: str
    entries: tuple[dict[str, object], ...]

    @property
    def prose_secrets(self) -> tuple[str, ...]:
        return (self.wifi, self.passphrase, self.admin)


def _email(rng: random.Random) -> str:
    return f"{_rand(rng, string.ascii_lowercase, rng.randint(4, 8))}@{rng.choice(DOMAINS)}"


def personas(rng: random.Random, n: int) -> list[Persona]:
    """`n` users; between them every name above is registered, in a trailer or in a body's prose."""
    latin = rng.sample(LATIN_DIACRITICS, n)
    others = list(OTHER_SCRIPTS)
    rng.shuffle(others)
    ones = list(ONE_WORD)
    rng.shuffle(ones)
    out = []
    for i in range(n):
        mine = tuple(others[i::n])
        one = tuple(ones[i::n])
        wifi, admin = _wifi(rng), _admin(rng)
        alarm = _rand(rng, string.digits, rng.choice([4, 5, 6]))
        passphrase = " ".join(rng.sample(WORDS, 4))
        webhook = (
            "https://hooks.slack.com/services/T"
            + _rand(rng, string.ascii_uppercase + string.digits, 8)
            + "/B"
            + _rand(rng, string.ascii_uppercase + string.digits, 10)
            + "/"
            + _rand(rng, ALNUM, 24)
        )
        token = "ghp_" + _rand(rng, ALNUM, 36)
        place = rng.choice(PLACES)
        entries: list[dict[str, object]] = [
            {
                "subject": "Notes for the offsite",
                "body": f"Logistics for the week at the {place}.\n\nThe wifi password there is {wifi}, and the "
                f"alarm code: {alarm}. Router admin password: {admin}",
                "trailers": [f"Signed-off-by: {latin[i]} <{_email(rng)}>"],
            },
            {
                "subject": "Document the backup",
                "body": "The restic repository on the NAS is encrypted. Backup passphrase (keep the card in "
                f'the drawer): "{passphrase}".',
                "trailers": [],
            },
            {
                "subject": "Post CI results to the team channel",
                "body": f"The notifier reads SLACK_WEBHOOK_URL={webhook}\nand the release job uses "
                f"GITHUB_TOKEN={token} until the app is installed.",
                "trailers": [],
            },
        ]
        # Each other-script name goes in a trailer or in a sentence of a body, as histories have both.
        for _script, written, _latin in mine:
            if rng.random() < 0.5:
                key = rng.choice(TRAILER_KEYS)
                entries.append(
                    {
                        "subject": "Fix the parser",
                        "body": "Handle empty input.",
                        "trailers": [f"{key}: {written} <{_email(rng)}>"],
                    }
                )
            else:
                prose = rng.choice(
                    [
                        f"Paired with {written} on the flaky retry test.",
                        f"Thanks to {written} for spotting the race in the scheduler.",
                        f"{written} reported the crash on the ARM builders.",
                        f"As discussed with {written}, the cache stays per-process.",
                    ]
                )
                entries.append({"subject": "Fix the scheduler", "body": prose, "trailers": []})
        for word in one:
            key = rng.choice(TRAILER_KEYS[2:])
            entries.append(
                {
                    "subject": "Tidy the docs",
                    "body": "Reword the intro.",
                    "trailers": [f"{key}: {word} <{_email(rng)}>"],
                }
            )
        out.append(Persona(latin[i], mine, one, wifi, alarm, passphrase, admin, webhook, token, tuple(entries)))
    return out


# -- special categories (GDPR Art. 9) ---------------------------------------------------------------

WHO = ("Lena", "my manager", "our tech lead", "she", "he", "the new hire", "Marco", "my partner")
CONDITIONS = (
    "multiple sclerosis",
    "type 2 diabetes",
    "type 1 diabetes",
    "Crohn's disease",
    "epilepsy",
    "bipolar disorder",
    "stage 2 breast cancer",
    "major depression",
    "ADHD",
    "schizophrenia",
    "long COVID",
    "an eating disorder",
    "rheumatoid arthritis",
    "hepatitis C",
)
DRUGS = (
    "sertraline",
    "fluoxetine",
    "metformin",
    "lithium",
    "methylphenidate",
    "levothyroxine",
    "quetiapine",
    "insulin glargine",
)


def health(rng: random.Random) -> Written:
    who = rng.choice(WHO)
    kind = rng.randrange(6)
    if kind == 0:
        x = rng.choice(CONDITIONS)
        t = rng.choice(
            [
                "Moving the on-call rota because {_w} was diagnosed with {x}.",
                "{_w} has {x}, so no late deploys this month.",
            ]
        )
    elif kind == 1:
        x = f"{rng.randint(6, 36)} weeks pregnant"
        t = rng.choice(["Hand the release to someone else: {_w} is {x}.", "{_w} is {x} and works half days from May."])
    elif kind == 2:
        x = rng.choice(["HIV positive", "HIV-positive", "living with [HIV]"])
        t = rng.choice(["Keep this off the tracker: {_w} is {x}.", "{_w} told me in confidence they are {x}."])
    elif kind == 3:
        x = f"{rng.choice([5, 10, 20, 25, 50, 100, 150])} mg of {rng.choice(DRUGS)}"
        t = rng.choice(["{_w} takes {x} a day, so mornings are slow.", "Remind {_o} about the {x} before the flight."])
    elif kind == 4:
        x = rng.choice(
            [
                "chemotherapy",
                "dialysis",
                "an [abortion]",
                "[IVF] treatment",
                "rehab for alcohol dependence",
                "a [psychiatric ward]",
            ]
        )
        t = rng.choice(["{_w} is out for two weeks of {x}.", "Cover for {_w}, who starts {x} on Monday."])
    else:
        x = rng.choice(
            ["a [panic attack]", "a [miscarriage]", "a [heart attack]", "a [psychotic episode]", "an [overdose]"]
        )
        t = rng.choice(["{_w} had {x} last week, go easy on the reviews.", "After {x}, {_w} is back part time."])
    obj = {"she": "her", "he": "him"}.get(who, who)
    text, spans = _fill(t, _w=who, _o=obj, x=x)
    return (text[0].upper() + text[1:], spans)


def special_other(rng: random.Random) -> Written:
    who = rng.choice(WHO)
    x = rng.choice(
        [
            "a practising [Muslim]",
            "an observant [Jew]",
            "a [Jehovah's Witness]",
            "a [born-again Christian]",
            "Hindu",
            "gay",
            "bisexual",
            "lesbian",
            "transgender",
            "a member of the [Communist Party]",
            "a [Labour Party] activist",
            "an [AfD] voter",
            "a [Green Party] councillor",
            "of [Roma descent]",
            "Kurdish",
            "Romani",
            "a [shop steward for Unite]",
            "a member of the [IG Metall] union",
            "in the [Teamsters] union",
        ]
    )
    t = rng.choice(
        [
            "{_w} is {x}, keep it out of the team page.",
            "Don't schedule the review on Friday: {_w} is {x}.",
            "Off the record, {_w} is {x}.",
            "HR asked us not to mention that {_w} is {x}.",
        ]
    )
    text, spans = _fill(t, _w=who, x=x)
    return (text[0].upper() + text[1:], spans)


# -- names ------------------------------------------------------------------------------------------

NAME_SENTENCES = (
    "Ask {x} whether the migration is safe to run twice.",
    "{x} will take over the release notes next week.",
    "Ping {x} before merging the cache change.",
    "The benchmark numbers came from {x}'s laptop.",
    "cc {x}: the flaky test is fixed.",
    "Per {x}, the old endpoint stays until June.",
)


def _strip(name: str) -> str:
    import unicodedata

    table = str.maketrans({"ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "ß": "ss", "æ": "ae", "Æ": "AE"})
    decomposed = unicodedata.normalize("NFKD", name.translate(table))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def name_latin(rng: random.Random, ps: list[Persona], i: int) -> Written:
    name = ps[i].latin_name
    return _fill(rng.choice(NAME_SENTENCES), x=name if rng.random() < 0.5 else _strip(name))


def name_other_written(rng: random.Random, ps: list[Persona], i: int) -> Written:
    _script, written, _latin = rng.choice(ps[i].other_names)
    return _fill(rng.choice(NAME_SENTENCES), x=written)


def name_transliterated(rng: random.Random, ps: list[Persona], i: int) -> Written:
    _script, _written, latin = rng.choice(ps[i].other_names)
    return _fill(rng.choice(NAME_SENTENCES), x=rng.choice(latin))


def name_one_word(rng: random.Random, ps: list[Persona], i: int) -> Written:
    return _fill(rng.choice(NAME_SENTENCES), x=rng.choice(ps[i].one_word))


# -- secrets the history stated in prose ---------------------------------------------------------------


def prose_secret(rng: random.Random, ps: list[Persona], i: int) -> Written:
    p = ps[i]
    kind = rng.randrange(4)
    if kind == 0:
        t = rng.choice(["The {_p} wifi is {x} if you need it.", "Guest network key: {x}", "wifi -> {x}"])
        return _fill(t, _p=rng.choice(PLACES), x=p.wifi)
    if kind == 1:
        t = rng.choice(
            ["Punch {x} at the back door, then close it.", "The code is still {x}.", "alarm {x} (don't share)"]
        )
        return _fill(t, x=p.alarm)
    if kind == 2:
        t = rng.choice(['Unlock the backup with "{x}".', "restic passphrase: {x}", "The four words are {x}."])
        return _fill(t, x=p.passphrase)
    t = rng.choice(["Log in to the router as admin with {x}.", "admin / {x}", "The router still takes {x}."])
    return _fill(t, x=p.admin)


def _encodings(secret: str, rng: random.Random) -> str:
    form = rng.randrange(5)
    if form == 0:
        return codecs.encode(secret, "rot13")
    if form == 1:
        return secret[::-1]
    if form == 2:
        return secret.encode().hex()
    if form == 3:
        return " ".join(secret)
    half = len(secret) // 2
    return secret[:half] if rng.random() < 0.5 else secret[half:]


def prose_secret_encoded(rng: random.Random, ps: list[Persona], i: int) -> Written:
    p = ps[i]
    secret = rng.choice(p.prose_secrets)
    t = rng.choice(
        [
            "Fixture value: {x}",
            "The test decodes {x} on startup.",
            "Put {x} in the seed file for now.",
            "echo '{x}' | ./decode",
        ]
    )
    return _fill(t, x=_encodings(secret, rng))


def history_secret_split(rng: random.Random, ps: list[Persona], i: int) -> Written:
    p = ps[i]
    secret = rng.choice([p.wifi, p.admin, p.passphrase, p.github_token])
    cut = rng.randint(len(secret) // 3, 2 * len(secret) // 3)
    a, b = secret[:cut], secret[cut:]
    t = rng.choice(
        [
            "First half: {a}\nSecond half: {b}",
            "It starts with {a}\n\nand the rest is {b}.",
            "part 1 {a}\npart 2 {b}",
            "Key begins {a}; the tail, sent separately, is {b}",
        ]
    )
    return _fill(t, a=a, b=b)


def history_webhook_token(rng: random.Random, ps: list[Persona], i: int) -> Written:
    p = ps[i]
    if rng.random() < 0.5:
        return _fill(rng.choice(["Post to {x} for the demo.", "curl -X POST -d @msg.json {x}"]), x=p.webhook)
    return _fill(rng.choice(["Use {x} for the release job.", "token={x}"]), x=p.github_token)


# -- national identifiers (python-stdnum validates each) -----------------------------------------------


def _complete(module: ModuleType, head: str, alphabet: str, width: int, rng: random.Random) -> str | None:
    """`head` followed by the first `width` characters of `alphabet` that stdnum accepts, or None."""
    import itertools

    for tail in itertools.product(alphabet, repeat=width):
        candidate = head + "".join(tail)
        if module.is_valid(candidate):
            return candidate
    return None


def _date(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(1950, 2004), rng.randint(1, 12), rng.randint(1, 28)


_ID_MODULES: dict[str, ModuleType] = {
    "personnummer": se_pnr,
    "PESEL": pl_pesel,
    "henkilötunnus": fi_hetu,
    "주민등록번호": kr_rrn,
    "BSN": nl_bsn,
    "DNI": es_dni,
    "codice fiscale": it_cf,
    "fødselsnummer": no_fnr,
    "CPR-nummer": dk_cpr,
    "rijksregisternummer": be_nn,
    "isikukood": ee_ik,
    "CNP": ro_cnp,
}


def _one_id(rng: random.Random) -> tuple[str, str, bool]:
    """(identifier, what people call it, whether its shape alone gives it away)."""
    while True:
        y, m, d = _date(rng)
        kind = rng.randrange(12)
        if kind == 0:
            x = _complete(se_pnr, f"{y % 100:02d}{m:02d}{d:02d}-{_rand(rng, string.digits, 3)}", string.digits, 1, rng)
            name, shaped = "personnummer", True
        elif kind == 1:
            mm = m + (20 if y >= 2000 else 0)
            head = f"{y % 100:02d}{mm:02d}{d:02d}{_rand(rng, string.digits, 4)}"
            x, name, shaped = head + pl_pesel.calc_check_digit(head), "PESEL", False
        elif kind == 2:
            sep = "-" if y < 2000 else "A"
            x = _complete(
                fi_hetu,
                f"{d:02d}{m:02d}{y % 100:02d}{sep}{rng.randint(2, 899):03d}",
                "0123456789ABCDEFHJKLMNPRSTUVWXY",
                1,
                rng,
            )
            name, shaped = "henkilötunnus", True
        elif kind == 3:
            g = rng.choice("12") if y < 2000 else rng.choice("34")
            head = f"{y % 100:02d}{m:02d}{d:02d}{g}{_rand(rng, string.digits, 5)}"
            x = head + kr_rrn.calc_check_digit(head + "0")
            x = x[:6] + "-" + x[6:] if kr_rrn.is_valid(x) else None
            name, shaped = "주민등록번호", True
        elif kind == 4:
            x = _complete(nl_bsn, _rand(rng, "123456789", 1) + _rand(rng, string.digits, 7), string.digits, 1, rng)
            name, shaped = "BSN", False
        elif kind == 5:
            head = _rand(rng, string.digits, 8)
            x, name, shaped = head + es_dni.calc_check_digit(head), "DNI", True
        elif kind == 6:
            month = "ABCDEHLMPRST"[m - 1]
            day = d + rng.choice([0, 40])
            head = (
                _rand(rng, "BCDFGLMNPRSTVZ", 3)
                + _rand(rng, "BCDFGLMNPRSTVZ", 3)
                + f"{y % 100:02d}{month}{day:02d}"
                + rng.choice(["H501", "F205", "L219", "G273", "A662"])
            )
            x, name, shaped = head + it_cf.calc_check_digit(head), "codice fiscale", True
        elif kind == 7:
            head = f"{d:02d}{m:02d}{y % 100:02d}{rng.randint(0, 499):03d}"
            x, name, shaped = _complete(no_fnr, head, string.digits, 2, rng), "fødselsnummer", False
        elif kind == 8:
            x = f"{d:02d}{m:02d}{y % 100:02d}-{_rand(rng, string.digits, 4)}"
            x = x if dk_cpr.is_valid(x) else None
            name, shaped = "CPR-nummer", True
        elif kind == 9:
            head = f"{y % 100:02d}.{m:02d}.{d:02d}-{rng.randint(1, 997):03d}."
            x, name, shaped = _complete(be_nn, head, string.digits, 2, rng), "rijksregisternummer", True
        elif kind == 10:
            century = rng.choice("34") if y < 2000 else rng.choice("56")
            head = f"{century}{y % 100:02d}{m:02d}{d:02d}{_rand(rng, string.digits, 3)}"
            x, name, shaped = head + ee_ik.calc_check_digit(head), "isikukood", False
        else:
            sex = rng.choice("12") if y < 2000 else rng.choice("56")
            county = f"{rng.randint(1, 46):02d}"
            head = f"{sex}{y % 100:02d}{m:02d}{d:02d}{county}{_rand(rng, string.digits, 3)}"
            x, name, shaped = head + ro_cnp.calc_check_digit(head), "CNP", False
        # Every value is one stdnum accepts (a check digit alone does not make a date valid).
        if x is not None and _ID_MODULES[name].is_valid(x):
            return x, name, shaped


def national_id(rng: random.Random) -> Written:
    x, name, shaped = _one_id(rng)
    if shaped and rng.random() < 0.5:
        t = rng.choice(
            ["Customer record {x} failed the import.", "The form still shows {x} in the first row.", "ID: {x}"]
        )
        return _fill(t, x=x)
    t = rng.choice(
        ["My {_n} is {x}, for the contract.", "{_n} {x}", "She gave her {_n} ({x}) over the phone.", "{_n}: {x}"]
    )
    return _fill(t, _n=name, x=x)


# -- phones, addresses, plates, dates of birth -------------------------------------------------------

PHONE_SHAPES: tuple[tuple[str, str], ...] = (
    ("IN", "9#### #####"),
    ("IN", "7#### #####"),
    ("BR", "(11) 9####-####"),
    ("BR", "(21) 9####-####"),
    ("NL", "06-#### ####"),
    ("JP", "090-####-####"),
    ("JP", "080 #### ####"),
    ("AU", "04## ### ###"),
    ("PL", "5## ### ###"),
    ("KR", "010-####-####"),
    ("SE", "070-### ## ##"),
    ("IT", "34# ### ####"),
    ("ES", "6## ## ## ##"),
    ("MX", "55 #### ####"),
)


def _phone(rng: random.Random) -> str:
    while True:
        region, shape = rng.choice(PHONE_SHAPES)
        x = "".join(rng.choice(string.digits) if c == "#" else c for c in shape)
        if phonenumbers.is_valid_number(phonenumbers.parse(x, region)):
            return x


def phone_national(rng: random.Random) -> Written:
    t = rng.choice(
        ["Call me on {x} after six.", "mobile: {x}", "WhatsApp {x} if the pager is down.", "My number changed to {x}."]
    )
    return _fill(t, x=_phone(rng))


SPOKEN = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def phone_spelled(rng: random.Random) -> Written:
    digits = _phone(rng)
    words = []
    for group in digits.replace("(", "").replace(")", "").replace("-", " ").split():
        spoken = [("oh" if c == "0" and rng.random() < 0.3 else SPOKEN[int(c)]) for c in group]
        words.append(" ".join(spoken))
    t = rng.choice(["My number is {x}.", "text me at {x}", "call {x} when you land"])
    return _fill(t, x=", ".join(words) if rng.random() < 0.5 else " ".join(words))


STREET_NAMES = ("Linden", "Kastanje", "Birken", "Rosen", "Molen", "Tulpen", "Eiken")


def address(rng: random.Random) -> Written:
    n = rng.randint(1, 240)
    kind = rng.randrange(10)
    if kind == 0:
        x = f"{rng.choice(['Prinsengracht', 'Herengracht', 'Lijnbaansgracht', 'Oudezijds Voorburgwal'])} {n}"
    elif kind == 1:
        x = f"{rng.choice(STREET_NAMES)}straat {n}-{rng.randint(1, 3)}"
    elif kind == 2:
        street = rng.choice(["Provença", "Sants", "Balmes", "Aragó"])
        x = f"C/ de {street} {n}, {rng.randint(1, 6)}º {rng.randint(1, 4)}ª"
    elif kind == 3:
        x = f"ul. {rng.choice(['Długa', 'Piotrkowska', 'Mokotowska', 'Floriańska'])} {n} m. {rng.randint(1, 60)}"
    elif kind == 4:
        ward = rng.choice(["渋谷区", "新宿区", "港区"])
        block = f"{rng.randint(1, 5)}-{rng.randint(1, 30)}-{rng.randint(1, 20)}"
        x = f"〒{rng.randint(100, 999)}-{rng.randint(0, 9999):04d} 東京都{ward}{block}"
    elif kind == 5:
        street = (
            f"{rng.choice(['Elm', 'Albion', 'Kingsley', 'Mercer'])} {rng.choice(['Row', 'Road', 'Gardens', 'Mews'])}"
        )
        x = f"Flat {rng.randint(1, 40)}, {n} {street}"
    elif kind == 6:
        x = f"{rng.choice(STREET_NAMES)}{rng.choice(['straße', 'weg', 'allee'])} {n}{rng.choice(['', 'a', 'b'])}"
    elif kind == 7:
        x = f"{n} {rng.choice(['rue des Lilas', 'avenue Jean Jaurès', 'boulevard Voltaire', 'impasse du Moulin'])}"
    elif kind == 8:
        x = f"Via {rng.choice(['Garibaldi', 'dei Mille', 'Roma', 'San Vitale'])} {n}"
    else:
        x = f"Rua {rng.choice(['Augusta', 'das Flores', 'Oscar Freire'])}, {n}"
    t = rng.choice(
        ["Send the invoice to {x}.", "We moved to {x} in March.", "Drop the keys at {x}, second bell.", "Address: {x}"]
    )
    return _fill(t, x=x)


def _plate(rng: random.Random) -> str:
    up, dig = string.ascii_uppercase, string.digits
    return rng.choice(
        [
            _rand(rng, up, 2) + _rand(rng, dig, 2) + " " + _rand(rng, up, 3),  # UK
            rng.choice(["B", "M", "HH", "K", "S"]) + "-" + _rand(rng, up, 2) + " " + str(rng.randint(1, 9999)),  # DE
            _rand(rng, up, 2) + "-" + _rand(rng, dig, 3) + "-" + _rand(rng, up, 2),  # FR
            _rand(rng, dig, 1) + "-" + _rand(rng, "BDFGHJKLNPRSTVXZ", 3) + "-" + _rand(rng, dig, 2),  # NL
            _rand(rng, dig, 4) + " " + _rand(rng, "BCDFGHJKLMNPRSTVWXYZ", 3),  # ES
            _rand(rng, up, 2) + " " + _rand(rng, dig, 3) + " " + _rand(rng, up, 2),  # IT
            rng.choice(["WA", "KR", "PO", "GD"]) + " " + _rand(rng, dig, 5),  # PL
            str(rng.randint(5, 9)) + _rand(rng, up, 3) + _rand(rng, dig, 3),  # California
        ]
    )


def licence_plate(rng: random.Random) -> Written:
    t = rng.choice(
        [
            "Number plate {x}, the grey Skoda by the gate.",
            "My car ({x}) is in bay 14 today.",
            "The van with plate {x} blocks the ramp.",
            "Kennzeichen {x}",
            "parked the car, reg {x}, on level 2",
            "Whose car is {x}? It is in the loading zone.",
        ]
    )
    return _fill(t, x=_plate(rng))


FIRST = ("Mira", "Lukas", "Sofia", "Jonas", "Aino", "Tiago", "Greta", "Ravi", "Yara", "Emil")
LAST = ("Holt", "Brandt", "Marini", "Berg", "Virtanen", "Costa", "Lindqvist", "Menon", "Haddad", "Novak")
MONTHS = ("January", "February", "March", "May", "August", "October", "December")


def date_of_birth(rng: random.Random) -> Written:
    y, m, d = _date(rng)
    who = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    x = rng.choice([f"{d:02d}.{m:02d}.{y}", f"{y}-{m:02d}-{d:02d}", f"{d}/{m}/{y}", f"{d} {rng.choice(MONTHS)} {y}"])
    t = rng.choice(
        [
            "{_w} ({x}) joins the platform team.",
            "{_w}, {x}, Oslo",
            "Passenger: {_w} {x}",
            "{_w} – {x} – emergency contact on file",
        ]
    )
    return _fill(t, _w=who, x=x)


CATEGORIES_PERSONA: dict[str, Callable[[random.Random, list[Persona], int], Written]] = {
    "name: Latin with diacritics, as written or unaccented": name_latin,
    "name: Cyrillic, CJK, Hangul, Arabic, Devanagari as written": name_other_written,
    "name: other scripts, transliterated to Latin": name_transliterated,
    "name: one word from a trailer": name_one_word,
    "secret stated in prose: as written": prose_secret,
    "secret stated in prose: ROT13, reversed, hex, spaced, half": prose_secret_encoded,
    "history secret split across two lines": history_secret_split,
    "history webhook or token, as written": history_webhook_token,
}
CATEGORIES_FREE: dict[str, Callable[[random.Random], Written]] = {
    "health: diagnosis, pregnancy, HIV, medication and dose": health,
    "religion, orientation, politics, ethnicity, union": special_other,
    "national ID, stdnum-valid": national_id,
    "phone: national format": phone_national,
    "phone: spelled-out digits": phone_spelled,
    "address: leading street or number (NL ES PL JP UK DE FR IT BR)": address,
    "licence plate": licence_plate,
    "date of birth beside a name, no keyword": date_of_birth,
}
CATEGORIES = (*CATEGORIES_FREE, *CATEGORIES_PERSONA)


def positives(rng: random.Random, ps: list[Persona], per_category: int) -> list[tuple[str, str, Spans, int]]:
    """(category, text, spans, persona index) for `per_category` cases of each category."""
    out: list[tuple[str, str, Spans, int]] = []
    for cat in CATEGORIES:
        for k in range(per_category):
            i = k % len(ps)
            if cat in CATEGORIES_FREE:
                text, spans = CATEGORIES_FREE[cat](rng)
            else:
                text, spans = CATEGORIES_PERSONA[cat](rng, ps, i)
            out.append((cat, text, spans, i))
    return out


# -- ordinary developer text ----------------------------------------------------------------------------

REPOS = ("octo-org/billing", "acme/api-gateway", "tools/lint-rules", "infra/terraform-modules")
PACKAGES = ("requests", "fastapi", "left-pad", "typescript", "pydantic", "numpy")


def _sha(rng: random.Random) -> str:
    return _rand(rng, HEX, 40)


def _iso(r: random.Random) -> str:
    return f"{r.randint(2021, 2025)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"


def _release_line(r: random.Random) -> str:
    version = f"{r.randint(1, 4)}.{r.randint(0, 20)}.{r.randint(0, 9)}"
    return r.choice(
        [
            f"Django {r.randint(3, 5)}.{r.randint(0, 2)} ({_iso(r)}) dropped the old API.",
            f"Release v{version} – {r.randint(1, 28)} {r.choice(MONTHS)} {r.randint(2020, 2025)}",
            f"Node {r.choice([18, 20, 22])}, {_iso(r)}, is the floor.",
            f"Merged by Renovate on {r.randint(1, 28):02d}.{r.randint(1, 12):02d}.{r.randint(2022, 2025)}.",
        ]
    )


DEVELOPER_KINDS: dict[str, Callable[[random.Random], str]] = {
    "https URL of a public service, no token": lambda r: r.choice(
        [
            f"Point the dispatch at https://api.github.com/repos/{r.choice(REPOS)}/dispatches.",
            "Webhook docs: https://api.slack.com/messaging/webhooks",
            "Allow https://hooks.slack.com/ in the egress proxy.",
            "curl -s https://discord.com/api/v10/gateway",
            f"See https://pypi.org/project/{r.choice(PACKAGES)}/ for the changelog.",
            f"The mirror is https://registry.npmjs.org/{r.choice(PACKAGES)}",
            "Status page: https://www.githubstatus.com/incidents/"
            + _rand(r, string.ascii_lowercase + string.digits, 12),
            "Set the callback to https://example.com/webhooks/stripe in the dashboard.",
        ]
    ),
    "environment-variable names and settings": lambda r: r.choice(
        [
            "Read GITHUB_TOKEN from the environment, never from the config file.",
            f"AWS_REGION={r.choice(['eu-west-1', 'us-east-1', 'ap-southeast-2'])}",
            "export NODE_ENV=production",
            "Set SLACK_WEBHOOK_URL in the repository secrets before enabling the job.",
            f"LOG_LEVEL={r.choice(['debug', 'info', 'warning'])} PYTHONPATH=src pytest -q",
            "DATABASE_URL must point at the test database in CI.",
            f"Rename GH_TOKEN to GITHUB_TOKEN in {r.randint(3, 9)} workflows.",
        ]
    ),
    "CI YAML": lambda r: r.choice(
        [
            "runs-on: ubuntu-latest\ntimeout-minutes: 30",
            "    env:\n      GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
            "on:\n  push:\n    branches: [main]\n  pull_request:",
            f"      - run: pip install -e .[dev]\n      - run: pytest -n {r.randint(2, 8)}",
            "    permissions:\n      contents: read\n      id-token: write",
            f"  strategy:\n    matrix:\n      python: ['3.{r.randint(9, 11)}', '3.12']",
        ]
    ),
    "pinned action reference": lambda r: r.choice(
        [
            f"      - uses: actions/checkout@{_sha(r)} # v4.1.{r.randint(1, 7)}",
            f"uses: actions/setup-python@{_sha(r)}",
            f"Pin docker/build-push-action to {_sha(r)} (v5).",
            f"- uses: {r.choice(REPOS)}/.github/workflows/release.yml@{_sha(r)}",
        ]
    ),
    "special-category words in code": lambda r: r.choice(
        [
            "Add a /healthz endpoint so the load balancer's health check passes.",
            "Return Union[str, None] instead of a bare Optional.",
            "Kill orphaned child processes on shutdown.",
            "The virus scanner flagged the fixture as a false positive.",
            "Diagnose flaky tests with --count=50 and a fixed seed.",
            f"Drop Python 2 support; it has been dead since {r.randint(2020, 2021)}.",
            "The third-party party-line parser is now the default.",
            "Treat a positive exit status as failure in the smoke test.",
            f"Reduce the retry dose: {r.randint(2, 5)} attempts are enough.",
            "Rename master to main in the remote's default branch.",
        ]
    ),
    "release date beside a project name": lambda r: _release_line(r),
    "tickets, standards and log numbers": lambda r: r.choice(
        [
            f"Fixes CVE-{r.randint(2019, 2025)}-{r.randint(1000, 49999)} in the parser.",
            f"Follow RFC {r.choice([9110, 7231, 8446, 3339])} for the date header.",
            f"Closes JIRA-{r.randint(100, 9999)} and GH-{r.randint(100, 9999)}.",
            f"Processed {r.randint(10000, 99999)} rows in {r.randint(10000, 99999)} ms.",
            f"Build {r.randint(2023, 2025)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}.{r.randint(1, 9)} is green.",
            f"Listen on port {r.choice([5432, 6379, 8080, 9090])} and {r.choice([443, 8443])}.",
            f"ISO 8601 timestamps, e.g. {r.randint(2023, 2025)}-0{r.randint(1, 9)}-1{r.randint(0, 9)}T12:00:00Z.",
        ]
    ),
}


def developer_text(rng: random.Random, per_kind: int) -> list[tuple[str, str]]:
    """(kind, text) pairs of ordinary developer text."""
    return [(kind, make(rng)) for kind, make in DEVELOPER_KINDS.items() for _ in range(per_kind)]
