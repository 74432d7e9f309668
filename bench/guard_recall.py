"""The egress guard's recall per category and its false positives, end to end through `plan_uplink`.

    python -m bench.guard_recall [--data /work/shared/data/commit-bodies-dev.jsonl] [--per-category 30]
                                 [--negatives 400] [--seed 0] [--draft-len 4] [--baseline REV]
                                 [--ordinary FILE]
                                 [--out docs/results]

Positives: sensitive spans in commit-body-like sentences, generated here from a seed with
synthetic identities only (names from made-up first/last name lists, addresses at example.com,
example.org, example.net and .invalid, card numbers with valid checksums on test ranges, IBANs with
valid check digits on made-up account numbers). Each category names one way a span can be
written (see CATEGORIES). Negatives: ordinary sentences of the dev data's query targets (the real
commit bodies), split into sentences, without trailer lines and without sentences that carry an
"@" or a name from the data's trailers (those are personal data, not ordinary text).

Every sentence runs through the device's decision path as it is on the wire: tokenized with the
default Specialist's tokenizer, drafted K tokens a round by a scripted device whose cloud accepts
every draft (the leaky copy control), each round planned by `sdk.uplink_guard.plan_uplink` with
the placeholder policy and the user's guard (`guard_for_profile`: the synthetic identities in the
history's trailers, a registered canary "my PIN is dddddd", and a real dev user's history for the
verbatim n-grams). A span is caught when no token overlapping it went up in the clear; a
negative is a false positive when any of its tokens did not go up as drafted.

The same sentences also measure what holding an address's local part costs (item 2 of issue
14): rounds and look-ahead tokens with the hold on and off, on the query targets of the dev data.
`--baseline REV` runs the detectors of a git revision on the same data for comparison.
Results: docs/results/guard_recall.{md,json}.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import subprocess
import sys
import time
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.gguf_cache import locate_embedded_gguf
from core.model_registry import DEFAULT_SPECIALIST
from privacy.guard import EgressGuard
from privacy.pii import PiiDetector, luhn_ok
from sdk.context import Profile
from sdk.uplink_guard import guard_for_profile, plan_uplink

DEFAULT_DATA = Path("/work/shared/data/commit-bodies-dev.jsonl")
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


# -- the device's decision path ------------------------------------------------------------------


@dataclass
class Outcome:
    sent: set[int]  # token indices that went up in the clear
    rounds: int
    lookahead: int
    decisions: Counter[str]


def run_text(guard: Any, tok: Any, ids: list[int], draft_len: int) -> Outcome:
    """Draft `ids` K tokens a round; the cloud accepts every draft. Which tokens went up in the clear?"""
    eos = tok.eos_token_id
    ids = [*ids, eos]
    sent: set[int] = set()
    p = rounds = lookahead = 0
    decisions: Counter[str] = Counter()
    while p < len(ids):
        draft = ids[p : p + draft_len]
        script = iter(ids[p + len(draft) :])
        plan = plan_uplink(
            guard,
            tok,
            ids[:p],
            [],
            draft,
            more=lambda s=script: next(s, None),
            eos_ids=frozenset({eos}),
            draft_len=draft_len,
        )
        rounds += 1
        lookahead += plan.lookahead
        for decision, count, label in plan.decisions:
            decisions[f"{decision} {label}"] += count
        if plan.keep_local:
            break
        sent.update(range(p + plan.kept - len(plan.draft), p + plan.kept))
        p += plan.kept
    sent.discard(len(ids) - 1)
    return Outcome(sent, rounds, lookahead, decisions)


def caught(tok: Any, sample: Sample, outcome: Outcome, offsets: list[tuple[int, int]]) -> bool:
    for i, (a, b) in enumerate(offsets):
        if i in outcome.sent and any(a < e and b > s for s, e in sample.spans):
            return False
    return True


def specialist_tokenizer() -> Any:
    """The default Specialist's tokenizer, read from its GGUF without loading the weights."""
    from transformers import AutoTokenizer

    gguf = locate_embedded_gguf(DEFAULT_SPECIALIST)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)


def load_baseline(rev: str) -> types.ModuleType:
    """The detectors module of git revision `rev`, imported under another name."""
    source = subprocess.run(
        ["git", "show", f"{rev}:privacy/detectors.py"], check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("baseline_detectors")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{rev}:privacy/detectors.py", "exec"), module.__dict__)
    return module


def guards(
    persons: list[Person], histories: list[list[str]], tok: Any, baseline: types.ModuleType | None
) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"guard": [], "guard, no local-part hold": []}
    if baseline is not None:
        out["baseline"] = []
    for p, history in zip(persons, histories, strict=True):
        trailer = f"Signed-off-by: {p.name} <{p.email}>"
        profile = Profile.from_obj({"profile": [{"subject": "s", "body": b, "trailers": [trailer]} for b in history]})
        g = guard_for_profile(profile, tok, "placeholder", canaries=[p.canary]).for_prompt("Write the commit body.")
        out["guard"].append(g)
        out["guard, no local-part hold"].append(without_local_holds(g))
        if baseline is not None:
            entries = [t for b in history for t in ("s", b)]
            old = baseline.EgressGuard.for_profile(
                entries,
                tok,
                identities=dict(profile.identities),
                canaries=[p.canary],
                policy=baseline.Policy("placeholder"),
            )
            out["baseline"].append(old.for_prompt("Write the commit body."))
    return out


def without_local_holds(guard: EgressGuard) -> EgressGuard:
    return replace(
        guard,
        detectors=tuple(
            PiiDetector(hold_local_parts=False) if isinstance(d, PiiDetector) else d for d in guard.detectors
        ),
    )


def measure(
    label: str, gs: list[Any], tok: Any, samples: list[Sample], negatives: list[str], draft_len: int
) -> dict[str, Any]:
    per_cat: dict[str, list[bool]] = defaultdict(list)
    missed: dict[str, list[str]] = defaultdict(list)
    for s in samples:
        enc = tok(s.text, add_special_tokens=False, return_offsets_mapping=True)
        outcome = run_text(gs[s.profile], tok, enc["input_ids"], draft_len)
        ok = caught(tok, s, outcome, enc["offset_mapping"])
        per_cat[s.category].append(ok)
        if not ok and len(missed[s.category]) < 3:
            a, b = s.spans[0]
            missed[s.category].append(s.text[a:b])
    fp = 0
    fp_kinds: Counter[str] = Counter()
    fp_patterns = 0
    fp_examples: list[tuple[str, list[str]]] = []
    rounds = lookahead = 0
    for i, text in enumerate(negatives):
        ids = tok.encode(text, add_special_tokens=False)
        outcome = run_text(gs[i % len(gs)], tok, ids, draft_len)
        rounds += outcome.rounds
        lookahead += outcome.lookahead
        if len(outcome.sent) < len(ids):
            fp += 1
            # Withheld by a pattern or a registered string, not by a verbatim run of the history.
            fp_patterns += any(d.split(" ")[0] != "cut" and not d.endswith("<PRIVATE>") for d in outcome.decisions)
            fp_kinds.update({label.split(" ", 1)[1] for label in outcome.decisions})
            if len(fp_examples) < 8:
                fp_examples.append((text, sorted(outcome.decisions)))
    recall = {c: {"caught": sum(v), "n": len(v), "recall": sum(v) / len(v)} for c, v in per_cat.items()}
    return {
        "label": label,
        "recall": recall,
        "missed_examples": dict(missed),
        "false_positives": fp,
        "negatives": len(negatives),
        "false_positive_rate": fp / max(1, len(negatives)),
        "false_positives_by_placeholder": dict(fp_kinds),
        "false_positives_patterns": fp_patterns,
        "false_positive_examples": fp_examples,
        "negative_rounds": rounds,
        "negative_lookahead_tokens": lookahead,
    }


def round_trip_cost(gs_on: list[Any], gs_off: list[Any], tok: Any, bodies: list[str], draft_len: int) -> dict[str, Any]:
    """Rounds and look-ahead tokens to send whole dev commit bodies, local-part hold on and off."""
    out = {}
    for label, gs in (("hold on", gs_on), ("hold off", gs_off)):
        rounds = lookahead = tokens = 0
        for i, body in enumerate(bodies):
            ids = tok.encode(body, add_special_tokens=False)
            o = run_text(gs[i % len(gs)], tok, ids, draft_len)
            rounds += o.rounds
            lookahead += o.lookahead
            tokens += len(ids)
        out[label] = {"bodies": len(bodies), "tokens": tokens, "rounds": rounds, "lookahead_tokens": lookahead}
    return out


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    labels = [r["label"] for r in runs]
    lines = [
        "# Egress guard: recall per category and false positives",
        "",
        f"Command: `{result['command']}`",
        "",
        f"{result['positives']} sensitive spans (synthetic identities, seed {result['seed']}) in commit-body-like "
        f"sentences and {result['negatives']} ordinary sentences of the dev data's query targets, each run "
        f"end to end through `plan_uplink` on {result['tokenizer']} token IDs, "
        f"K = {result['draft_len']} drafted tokens a round, "
        "placeholder policy, a cloud that accepts every draft. A span counts as caught when none of the tokens "
        "overlapping it went up in the clear; an ordinary sentence is a false positive when any of its tokens "
        "did not go up as drafted. Goal: recall >= 95 % in every category, false positives <= 2 %.",
        "",
        "| category | n | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for cat in CATEGORIES:
        n = runs[0]["recall"][cat]["n"]
        cells = [f"{100 * r['recall'][cat]['recall']:.1f} %" for r in runs]
        lines.append(f"| {cat} | {n} | " + " | ".join(cells) + " |")
    lines.append(
        "| **false positives** (ordinary sentences) | "
        + str(result["negatives"])
        + " | "
        + " | ".join(f"{100 * r['false_positive_rate']:.1f} % ({r['false_positives']})" for r in runs)
        + " |"
    )
    lines.append(
        "| false positives of the pattern and registered-string detectors alone | "
        + str(result["negatives"])
        + " | "
        + " | ".join(f"{100 * r['false_positives_patterns'] / r['negatives']:.1f} %" for r in runs)
        + " |"
    )
    prev = result.get("previous")
    if prev:
        lines += [
            "",
            f"The result this run replaced (`{prev['command']}`) had guard false positives of "
            f"{100 * prev['false_positive_rate']:.1f} % ({prev['false_positives']} of {prev['negatives']}).",
        ]
    lines += ["", "False positives by the placeholder of the span the guard saw (a sentence may count twice):", ""]
    for r in runs:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["false_positives_by_placeholder"].items())) or "none"
        lines.append(f"* {r['label']}: {kinds}")
    lines += ["", "Spans that still reach the cloud (up to three per category, per configuration):", ""]
    for r in runs:
        for cat, examples in r["missed_examples"].items():
            lines.append(f"* {r['label']}, {cat}: " + ", ".join(f"`{e!r}`" for e in examples))
    cost = result["round_trip_cost"]
    lines += [
        "",
        "## What holding an address's local part costs",
        "",
        f"The query targets of the dev data ({cost['hold on']['bodies']} commit bodies, "
        f"{cost['hold on']['tokens']} tokens), sent through the same scripted loop:",
        "",
        "| local-part hold | rounds | look-ahead tokens drafted on the device |",
        "|---|---|---|",
    ]
    for label in ("hold off", "hold on"):
        c = cost[label]
        lines.append(f"| {label} | {c['rounds']} | {c['lookahead_tokens']} |")
    lines += ["", f"Run time: {result['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def previous_result(path: Path) -> dict[str, Any] | None:
    """The false positives of the result this run overwrites (its guard column), to state before/after."""
    try:
        old = json.loads(path.read_text())
        guard = next(r for r in old["runs"] if r["label"] == "guard")
        return {
            "command": old["command"],
            "false_positives": guard["false_positives"],
            "negatives": guard["negatives"],
            "false_positive_rate": guard["false_positive_rate"],
        }
    except (OSError, ValueError, KeyError, StopIteration):
        return None


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--per-category", type=int, default=30)
    parser.add_argument("--negatives", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--baseline", default=None, help="a git revision whose detectors to compare")
    parser.add_argument(
        "--ordinary", type=Path, default=None, help="ordinary sentences, one a line (default: dev data)"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    args = parser.parse_args(list(argv) if argv is not None else None)
    if not args.data.is_file():
        print(f"error: no data file at {args.data}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    tok = specialist_tokenizer()
    users = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    rng = random.Random(args.seed)
    persons = people(rng, 4)
    # The guards' histories: the bodies of the first four dev users; ordinary text: the others' targets.
    histories = [[e["body"] for e in u["profile"] if e.get("body")] for u in users[:4]]
    samples = positives(rng, persons, args.per_category)
    if args.ordinary is not None:
        negatives = [line for line in args.ordinary.read_text().splitlines() if line.strip()][: args.negatives]
    else:
        negatives = ordinary_sentences(users[4:], args.negatives, rng)
    baseline = load_baseline(args.baseline) if args.baseline else None
    gs = guards(persons, histories, tok, baseline)
    order = ["baseline", "guard"] if baseline is not None else ["guard"]
    runs = [measure(label, gs[label], tok, samples, negatives, args.draft_len) for label in order]
    bodies = [q["target"] for u in users[4:] for q in u["queries"]]
    cost = round_trip_cost(gs["guard"], gs["guard, no local-part hold"], tok, bodies, args.draft_len)
    command = "python -m bench.guard_recall " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("data", "out") and v is not None
    )
    result = {
        "command": command,
        "seed": args.seed,
        "draft_len": args.draft_len,
        "tokenizer": DEFAULT_SPECIALIST,
        "positives": len(samples),
        "negatives": len(negatives),
        "runs": runs,
        "round_trip_cost": cost,
        "seconds": time.perf_counter() - start,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    result["previous"] = previous_result(args.out / "guard_recall.json")
    (args.out / "guard_recall.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    (args.out / "guard_recall.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
