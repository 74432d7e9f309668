"""Special categories of personal data (GDPR Art. 9): health, sexual life, religion, political
opinion, ethnicity, trade-union membership (issue #49, finding 2).

A curated vocabulary shipped with the package (`privacy/data/special_categories.txt`, lower-case
terms and phrases under "[category tier]" headers) plus a few patterns, matched on the folded text
(`privacy.normalize.fold`) word by word:

* a *strong* term is a span wherever it stands as words in prose: conditions and diagnoses
  ("epilepsy", "type 1 diabetes", "HIV positive"), pregnancy, medications by generic and brand
  name ("metformin", "Zoloft"), disabilities, and phrases that state a belief or membership
  ("converted to Islam", "union member");
* a *cued* term is a span only after a personal cue within two words ("has cancer", "with
  ADHD", "is gay", "a devout Muslim", "she's a Democrat"): the word alone is ordinary text
  ("cancer research", "a stroke width");
* patterns: "N weeks/months pregnant" (the number included), and what follows "diagnosed with",
  "diagnosis of" or "tested positive for" (up to four words, to punctuation or a function word;
  "suffers from" is ordinary in developer text, "the parser suffers from...", so only the
  vocabulary's cued terms follow it).

Words inside code are no prose: a word in a chunk that carries `_`, a path or URL character, an
operator, a bracket or a dot between letters (`health_check`, `religion_id`, `/healthz`,
`is_pregnant()`) is never matched, nor is a word joined to letters (`healthz`, `isPregnant`).

The hazard ("could begin", `privacy.guard`): the end of the text could still grow into a term
from the first letter of a word that begins one - a prefix trie over the vocabulary (a sorted
list, searched by bisection), so "Metformin" drafted as " Met" + "form" + "in" is held from
" Met" - and from a number that could begin "9 weeks pregnant". Cued terms hold only after a
cue. At the end of the text (`hold_prefixes=False`: nothing more will be written) a prefix stays
the word it is.

Limits: English only; a term not in the list (a rare condition, a new brand) is not found unless
a pattern introduces it; a cued term without a cue ("Muslim colleagues") is not found.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from importlib import resources

from specsteer.privacy.normalize import fold
from specsteer.privacy.spans import SPECIAL_CATEGORY, Detector, Span, merge_spans

__all__ = ["CATEGORIES", "SpecialCategoryRecognizer", "vocabulary"]

CATEGORIES = ("health", "sexual-life", "religion", "political", "ethnicity", "trade-union")

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?\+?")
_SEP = re.compile(r"[ \t\n\-]+")  # between the words of a phrase
_CODE = re.compile(r"[_/\\=<>{}\[\]()$#@`|*~^]|[a-z0-9][.:][a-z0-9]")
_EDGE = "\"'([{.,;:!?)]}"  # prose punctuation around a chunk

# A personal cue before a cued term (two words back at most, with articles and a few adjectives
# between): health terms follow a possessive or a verb of having; the others a copula.
_SKIP = (
    r"(?:(?:a|an|the|very|openly|devout|practising|practicing|observant|religious|registered|lifelong|proud|chronic|severe|mild"
    r"|clinical|early|late|stage|some)\s+){0,2}"
)
_HEALTH_CUE = re.compile(
    r"(?<![a-z0-9'])(?:has|have|had|having|with|diagnosed|suffers|suffering|suffered|from|for|my|his|her|their|our|your"
    r"|is|am|are|was|were|i'm|im|he's|she's|they're|got|developed|manage|managing|manages|battling|fighting"
    r"|on|takes|taking|took|prescribed|sees|seeing)\s+" + _SKIP + r"\Z"
)
_IDENTITY_CUE = re.compile(
    r"(?<![a-z0-9'])(?:is|am|are|was|were|i'm|im|he's|she's|they're|we're|being|became|become|identifies as"
    r"|identify as|came out as|as|raised|born|fellow|my|his|her|their|our|member of|votes? for|voted for|supports?"
    r"|supporter of|joined|in)\s+" + _SKIP + r"\Z"
)
# A party or a union by its proper name after a personal cue ("is a Green Party councillor", "a
# member of the Communist Party", "in the Teamsters union", "of the IG Metall union"): no list of
# every party and union exists, but their names are capitalized words before "Party" or "union".
_NAMED_GROUP = re.compile(r"(?<![\w-])(?:[A-Z][\w'-]*[ \t]+){1,3}?(?:Party|[Uu]nion)(?![\w-])")
_NAMED_GROUP_HAZARD = re.compile(r"(?<![\w-])(?:[A-Z][\w'-]*[ \t]*){1,3}(?:(?<=[ \t])(?:u|un|uni|unio))?\Z")
# A medication's dose and what follows it ("150 mg of quetiapine", "25 mg insulin glargine"):
# a dose in mg/mcg/ml/IU is no developer's unit, and the drug after it is health data whether or
# not the vocabulary lists it.
_DOSE = (
    r"(?<![\w.])\d+(?:[.,]\d+)?[ \t]*(?:mg|mcg|µg|ug|ml|iu|units?)(?![a-z0-9])(?:[ \t]+of)?"
    r"(?:[ \t]+(?!(?:{stop})(?![a-z0-9'-]))[a-z][a-z0-9'-]*){{0,2}}"
)
_DOSE_HAZARD = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d*)?(?:[ \t]*(?:m|mg|mc|mcg|µ|µg|u|ug|ml|i|iu|un|uni|unit|units)"
    r"(?:[ \t]+(?:o|of)?)?(?:[ \t]+[a-z][a-z0-9'-]*)?)?[ \t]*\Z"
)

_NUMBER = r"(?:\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|few|several)"
_PREGNANT = re.compile(
    r"(?<![\w.#/])" + _NUMBER + r"[ \t\-]*(?:weeks?|wks?|months?)[ \t\-]+(?:pregnant|along)(?![a-z0-9])"
)
# The end of a text that may still become "N weeks pregnant": a number, then prefixes.
_PREGNANT_HAZARD = re.compile(
    r"(?<![\w.#/,:\-])\d{1,2}(?:[ \t\-]*(?:w|we|wee|week|weeks|wk|wks|m|mo|mon|mont|month|months)"
    r"(?:[ \t\-]+(?:p|pr|pre|preg|pregn|pregna|pregnan|a|al|alo|alon)?)?)?[ \t\-]*\Z"
)
_STOP = (
    r"in|at|on|last|this|that|and|but|so|after|before|when|since|by|ago|yesterday|today|recently|which"
    r"|who|because|while|during|as|two|three|four|five|years?|months?|weeks?|days?|the|a|an|to|of|is|was|and"
)
_DOSE_RE = re.compile(_DOSE.format(stop=_STOP))
_FOR_NAME_HAZARD = re.compile(r"[ \t]+(?:f|fo|for|o|of|a|at)(?:[ \t]+(?:[A-Z][\w'-]*)?)?[ \t]*\Z")
_JOIN = re.compile(r"[ \t]+(?:for|of|with)[ \t]+")
_FOR_NAME = re.compile(r"[ \t]+(?:for|of|at)[ \t]+(?:[A-Z][\w'-]*)(?:[ \t]+[A-Z][\w'-]*)?")
_STAGE_BEFORE = re.compile(r"(?<![\w])stage[ \t]+(?:[0-4]|i{1,3}|iv)[abc]?[ \t]+\Z")
_STAGE_HAZARD = re.compile(
    r"(?<![\w])(?:s|st|sta|stag|stage(?:[ \t]+(?:(?:[0-4]|i{1,3}|iv)[abc]?(?:[ \t]+[a-z]*){0,3})?)?[ \t]*)\Z"
)
_INTRODUCED = re.compile(
    r"(?<![a-z0-9])(?:diagnosed\s+(?:with|as\s+having)|diagnosis\s+of|tested\s+positive\s+for)\s+(?:(?:a|an|the)\s+)?"
    r"((?!(?:" + _STOP + r")(?![a-z0-9'+-]))[a-z0-9'+-]+"
    r"(?:[ \t]+(?!(?:" + _STOP + r")(?![a-z0-9'+-]))[a-z0-9'+-]+){0,3})"
)


@dataclass(frozen=True)
class _Term:
    words: tuple[str, ...]
    category: str
    cued: bool


@dataclass(frozen=True)
class _Vocabulary:
    by_first: dict[str, tuple[_Term, ...]]  # first word -> terms, longest first
    strong: tuple[str, ...]  # phrases joined by one space, sorted (the trie, searched by bisection)
    cued_health: tuple[str, ...]
    cued_identity: tuple[str, ...]

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_first.values())


def _parse(text: str) -> list[_Term]:
    terms: list[_Term] = []
    category, cued = "", False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            category, tier = line.strip("[]").split()
            if category not in CATEGORIES or tier not in ("strong", "cued"):
                raise ValueError(f"unknown section {line!r} in the special-category vocabulary")
            cued = tier == "cued"
            continue
        words = tuple(_WORD.findall(line))
        if words:
            terms.append(_Term(words, category, cued))
    return terms


@functools.lru_cache(maxsize=1)
def vocabulary() -> _Vocabulary:
    """The shipped vocabulary, parsed once."""
    text = resources.files("specsteer.privacy").joinpath("data/special_categories.txt").read_text(encoding="utf-8")
    terms = _parse(text)
    by_first: dict[str, list[_Term]] = {}
    for t in terms:
        by_first.setdefault(t.words[0], []).append(t)
    ordered = {w: tuple(sorted(ts, key=lambda t: (-len(t.words), t.cued))) for w, ts in by_first.items()}
    strong = tuple(sorted({" ".join(t.words) for t in terms if not t.cued}))
    health = tuple(sorted({" ".join(t.words) for t in terms if t.cued and t.category == "health"}))
    identity = tuple(sorted({" ".join(t.words) for t in terms if t.cued and t.category != "health"}))
    return _Vocabulary(ordered, strong, health, identity)


def _in_code(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` lies in a chunk of code (an identifier, a path, a call) or is
    joined to letters on either side."""
    a = start
    while a > 0 and not text[a - 1].isspace():
        a -= 1
    b = end
    while b < len(text) and not text[b].isspace():
        b += 1
    chunk = text[a:b].strip(_EDGE)
    return _CODE.search(chunk) is not None


def _cued(text: str, start: int, category: str) -> bool:
    cue = _HEALTH_CUE if category == "health" else _IDENTITY_CUE
    return cue.search(text, max(0, start - 48), start) is not None


def _has_prefix(phrases: tuple[str, ...], fragment: str) -> bool:
    i = bisect.bisect_left(phrases, fragment)
    return i < len(phrases) and phrases[i].startswith(fragment)


class SpecialCategoryRecognizer(Detector):
    """Special-category data by the shipped vocabulary and patterns (see the module docstring)."""

    def __init__(self, *, hold_prefixes: bool = True) -> None:
        self.hold_prefixes = hold_prefixes
        self.vocabulary = vocabulary()

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        t = f.text
        found: list[tuple[int, int]] = []
        words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(t)]
        i = 0
        while i < len(words):
            a, _, w = words[i]
            matched = 0
            for term in self.vocabulary.by_first.get(w, ()):
                n = len(term.words)
                if i + n > len(words) or any(words[i + j][2] != term.words[j] for j in range(n)):
                    continue
                if any(_SEP.fullmatch(t, words[i + j][1], words[i + j + 1][0]) is None for j in range(n - 1)):
                    continue
                b = words[i + n - 1][1]
                if (a > 0 and t[a - 1].isalnum()) or (b < len(t) and t[b].isalnum()) or _in_code(t, a, b):
                    continue
                if term.cued and not _cued(t, a, term.category):
                    continue
                found.append((a, b))
                matched = n
                break
            i += matched or 1
        for m in _PREGNANT.finditer(t):
            if not _in_code(t, m.start(), m.end()):
                found.append((m.start(), m.end()))
        # A stage before a condition is part of it ("stage 2 breast cancer").
        found = [
            (st.start(), b) for a, b in found if (st := _STAGE_BEFORE.search(t, 0, a)) is not None and st.end() == a
        ] + found
        for m in _DOSE_RE.finditer(t):
            if not _in_code(t, m.start(), m.end()):
                found.append((m.start(), m.end()))
        # On the raw text: a proper name is told by its capitals, which folding drops.
        lower = text.lower()
        named = [
            Span(m.start(), m.end(), SPECIAL_CATEGORY)
            for m in _NAMED_GROUP.finditer(text)
            if _IDENTITY_CUE.search(lower, max(0, m.start() - 48), m.start()) is not None
            and not _in_code(lower, m.start(), m.end())
        ]
        for m in _INTRODUCED.finditer(t):
            if not _in_code(t, m.start(1), m.end(1)):
                found.append((m.start(1), m.end(1)))
        # "rehab for alcohol dependence", "shop steward for Unite": a term, a preposition, and
        # another term or a proper name are one statement; the preposition between is not left out.
        found = sorted(found)
        joined: list[tuple[int, int]] = []
        for a, b in found:
            if joined and _JOIN.fullmatch(t, joined[-1][1], a):
                joined[-1] = (joined[-1][0], max(b, joined[-1][1]))
            else:
                joined.append((a, b))
        spans = [Span(*f.span(a, b), SPECIAL_CATEGORY) for a, b in joined]
        for sp in list(spans):
            after = _FOR_NAME.match(text, sp.end)
            if after is not None:
                spans.append(Span(sp.start, after.end(), SPECIAL_CATEGORY))
        return merge_spans([*spans, *named])

    def hazard(self, text: str) -> Span | None:
        if not self.hold_prefixes:
            return None
        f = fold(text)
        t = f.text
        at = max(0, len(t) - 120)
        tail = t[at:]
        starts: list[int] = []
        m = _PREGNANT_HAZARD.search(tail)
        if m is not None and not _in_code(tail, m.start(), len(tail)):
            starts.append(m.start())
        m = _STAGE_HAZARD.search(tail)
        if m is not None and not _in_code(tail, m.start(), len(tail)):
            starts.append(m.start())
        m = _DOSE_HAZARD.search(tail)
        if m is not None and not _in_code(tail, m.start(), len(tail)):
            starts.append(m.start())
        # Capitalized words after a personal cue may still become "... Party" or "... union".
        raw_tail = text[len(text) - len(text[-120:]) :]
        m = _NAMED_GROUP_HAZARD.search(raw_tail)
        named = None
        if m is not None and _IDENTITY_CUE.search(raw_tail.lower(), max(0, m.start() - 48), m.start()) is not None:
            named = len(text) - len(raw_tail) + m.start()
        # The trailing word, and up to five words before it: where a phrase could have begun.
        begins = [w.start() for w in _WORD.finditer(tail)][-6:]
        v = self.vocabulary
        for s in begins:
            if s > 0 and (tail[s - 1].isalnum() or tail[s - 1] == "'"):
                continue
            fragment = _SEP.sub(" ", tail[s:])
            if not fragment.strip() or _in_code(tail, s, len(tail)):
                continue
            if _has_prefix(v.strong, fragment) or (
                (_has_prefix(v.cued_health, fragment) and _cued(tail, s, "health"))
                or (_has_prefix(v.cued_identity, fragment) and _cued(tail, s, "religion"))
            ):
                starts.append(s)
                break
        # A term just written may go on with "for <a name>" ("shop steward for Unite").
        m = _FOR_NAME_HAZARD.search(text[-40:])
        if m is not None:
            cut = len(text) - len(text[-40:]) + m.start()
            lo = max(0, cut - 80)
            if any(sp.end == cut - lo for sp in self.find(text[lo:cut])):
                named = cut if named is None else min(named, cut)
        raws = [f.raw_start(at + s) for s in starts] + ([named] if named is not None else [])
        if not raws:
            return None
        return Span(min(raws), len(text), SPECIAL_CATEGORY)
