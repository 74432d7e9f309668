"""One normal form for every detector: what a text says, not how its characters are spelled.

A leak need not use the characters a pattern expects: "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ" (full width),
"jаne@exаmple.com" (Cyrillic "а"), "ja\u200bne" (a zero-width space) or "JANE" all read as the
plain text to a person. So the detectors never match the raw text: they match `fold(text).text`
and map what they find back to the raw text with `Folded.span`, so the cut falls on the
characters that were actually drafted.

The fold, character by character (so every folded character knows where it came from):

1. compatibility decomposition (NFKD): full-width and ligature forms, mathematical letters,
   circled digits, non-breaking and ideographic spaces become their plain forms;
2. combining marks and invisible format characters (zero-width spaces and joiners, soft hyphens,
   bidirectional controls) are dropped: "jáne" and "ja\u200bne" are "jane";
3. confusables: letters of other scripts that look like Latin letters (Cyrillic, Greek,
   Armenian, Latin-extension look-alikes) and look-alike punctuation (dashes, dots, at signs,
   slashes) become the ASCII character they imitate; the table follows Unicode's confusables
   data (UTS #39) for the Latin lookalikes, not any one test set;
4. digits of every script (Arabic-Indic "٤", Devanagari "४", Thai "๔", ...) become ASCII digits
   (`unicodedata.digit`), ahead of any look-alike punctuation they resemble;
5. case: lower case;
6. letters spaced out one by one ("j o h n @ e x a m p l e . c o m", five or more single
   characters, two of them letters, with gaps of up to eight spaces or tabs) are joined; a gap more
   than twice the narrowest stays one space (it separates words), and one at the very end of the
   text is dropped;
7. digits written as number words, one word a digit ("six six zero four", "sechs null", "cinq
   zéro", "seis cero"; English, French, German, Spanish, Italian, Portuguese, Dutch) become the
   digit, where two or more follow each other: a PIN spelled out is still the PIN. A lone "one"
   stays a word. Words of the spelling alphabet ("alpha bravo seven x-ray") become their letters,
   joined, in a run of three or more spelled characters with two of its words at least.

Text that is already ASCII takes a fast path (only steps 5, 6 and 7).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

__all__ = ["CONFUSABLES", "DIGIT_WORDS", "DIGIT_WORD_PREFIXES", "Folded", "fold", "fold_string", "spelled_tail"]

# Look-alikes of ASCII letters, digits and punctuation (after NFKD), from Unicode's confusables
# for Latin: the characters an attacker reaches for because a reader cannot tell them apart.
_PAIRS = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "һ": "h",
    "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g", "ү": "y", "ӏ": "l", "ԍ": "g", "ս": "u",
    "А": "a", "В": "b", "Е": "e", "К": "k", "М": "m", "Н": "h", "О": "o", "Р": "p", "С": "c",
    "Т": "t", "У": "y", "Х": "x", "Ѕ": "s", "І": "i", "Ј": "j", "Ԁ": "d", "Ԛ": "q", "Ԝ": "w",
    "Ү": "y", "Ӏ": "l", "З": "3", "з": "3", "б": "6",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j",
    "Α": "a", "Β": "b", "Ε": "e", "Ζ": "z", "Η": "h", "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n",
    "Ο": "o", "Ρ": "p", "Τ": "t", "Υ": "y", "Χ": "x", "Ϲ": "c",
    # Armenian, Cherokee and Latin extensions that imitate ASCII letters
    "օ": "o", "ց": "g", "հ": "h", "ո": "n", "ռ": "n", "ᴀ": "a", "ʙ": "b", "ᴄ": "c", "ᴅ": "d",
    "ᴇ": "e", "ɢ": "g", "ʜ": "h", "ɪ": "i", "ᴊ": "j", "ᴋ": "k", "ʟ": "l", "ᴍ": "m", "ɴ": "n",
    "ᴏ": "o", "ᴘ": "p", "ʀ": "r", "ꜱ": "s", "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ʏ": "y",
    "ᴢ": "z", "ı": "i", "ȷ": "j", "ɑ": "a", "ɩ": "i", "ʋ": "u", "ℓ": "l", "ꮪ": "s", "Ꭰ": "d",
    "Ꭼ": "e", "Ꮋ": "h", "Ꭻ": "j", "Ꮶ": "k", "Ꮮ": "l", "Ꮇ": "m", "Ꮲ": "p", "Ꮪ": "s", "Ꮤ": "w",
    "ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ł": "l", "ħ": "h",
    # punctuation
    "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "―": "-", "−": "-", "⁃": "-", "﹘": "-",
    "ー": "-", "。": ".", "｡": ".", "·": ".", "・": ".", "۔": ".", "⁄": "/", "∕": "/",
    "⧸": "/", "＼": "\\", "∶": ":", "׃": ":", "˸": ":", "‚": ",", "،": ",", "ʻ": "'", "ʼ": "'",
    "‘": "'", "’": "'", "“": '"', "”": '"', "ⓐ": "@", "\t": " ",
}  # fmt: skip
CONFUSABLES: dict[str, str] = dict(_PAIRS)

_DROP = frozenset({"Mn", "Me", "Cf"})


@functools.lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    digit = unicodedata.digit(ch, None)
    if digit is not None and unicodedata.category(ch) == "Nd":
        return str(digit)
    out = []
    for c in unicodedata.normalize("NFKD", ch):
        if unicodedata.category(c) in _DROP:
            continue
        c = CONFUSABLES.get(c, c)
        if unicodedata.category(c[0]) == "Zs":
            c = " "
        out.append(c)
    return "".join(out).lower()


@dataclass(frozen=True)
class Folded:
    """`text` folded, and for each folded character the raw `[start, end)` it came from."""

    raw: str
    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The raw range of folded `[start, end)` (an empty range maps to an empty raw range)."""
        if start >= len(self.text):
            return len(self.raw), len(self.raw)
        a = self.starts[start]
        b = self.ends[end - 1] if end > start else a
        return a, b

    def raw_start(self, start: int) -> int:
        return self.starts[start] if start < len(self.text) else len(self.raw)


@functools.lru_cache(maxsize=256)
def fold(text: str) -> Folded:
    """The normal form every detector matches on (see the module docstring); cached per text."""
    if text.isascii():
        folded = text.replace("\t", " ").lower()
        idx = tuple(range(len(text)))
        return _digit_words(_join_spaced(Folded(text, folded, idx, tuple(i + 1 for i in idx))))
    parts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for i, ch in enumerate(text):
        f = ch.replace("\t", " ").lower() if ch.isascii() else _fold_char(ch)
        parts.append(f)
        starts.extend([i] * len(f))
        ends.extend([i + 1] * len(f))
    return _digit_words(_join_spaced(Folded(text, "".join(parts), tuple(starts), tuple(ends))))


# Five or more single characters, each followed by a gap of spaces (tabs are spaces by now):
# "j o h n @ e x a m p l e", "j   o   h   n". A run that reaches the end of the text takes its
# trailing gap along: the text is still being drafted, and the next character may go on with the
# run ("t o r v a l d . " + "s"), so the gap must not end the word a hazard is holding.
_SPACED = re.compile(r"(?<!\S)(?:\S {1,8}){4,}(?:\S {1,8}\Z|\S(?!\S))")


def _join_spaced(f: Folded) -> Folded:
    """`f` with letters spaced out one by one joined (step 6 of the module docstring)."""
    runs = [m for m in _SPACED.finditer(f.text) if sum(c.isalpha() for c in m.group().split()) >= 2]
    if not runs:
        return f
    keep = [True] * len(f.text)
    for m in runs:
        gaps = [g for g in re.finditer(r" +", m.group()) if m.start() + g.end() < len(f.text)]
        narrow = min(len(g.group()) for g in gaps)
        for g in re.finditer(r" +", m.group()):
            a, b = m.start() + g.start(), m.start() + g.end()
            # The narrowest gaps separate letters (an uneven hand may add a space here and there);
            # one more than twice as wide separates words and stays one space. A gap at the very
            # end is dropped whatever its width (see `_SPACED`).
            for i in range(a, b if len(g.group()) <= 2 * narrow or b == len(f.text) else b - 1):
                keep[i] = False
    text = "".join(c for c, k in zip(f.text, keep, strict=True) if k)
    starts = tuple(s for s, k in zip(f.starts, keep, strict=True) if k)
    ends = tuple(e for e, k in zip(f.ends, keep, strict=True) if k)
    return Folded(f.raw, text, starts, ends)


# Number words of the digits, as folded (accents gone: "zéro" is "zero", "fünf" is "funf").
_DIGIT_WORDS: dict[str, str] = {}
for _digits in (
    "zero one two three four five six seven eight nine",  # English
    "zero un deux trois quatre cinq six sept huit neuf",  # French
    "null eins zwei drei vier funf sechs sieben acht neun",  # German
    "cero uno dos tres cuatro cinco seis siete ocho nueve",  # Spanish
    "zero uno due tre quattro cinque sei sette otto nove",  # Italian
    "zero um dois tres quatro cinco seis sete oito nove",  # Portuguese
    "nul een twee drie vier vijf zes zeven acht negen",  # Dutch
):
    for _i, _w in enumerate(_digits.split()):
        _DIGIT_WORDS.setdefault(_w, str(_i))
_DIGIT_WORDS.update({"une": "1", "ein": "1", "fuenf": "5", "zwo": "2", "oh": "0"})
del _digits, _i, _w
# The spelling alphabet (ICAO/NATO): "alpha bravo seven" spells "ab7". Its words are read as
# letters only in a run of three or more spelled characters with two of its words at least
# ("echo one two" stays a command, "Delta Air" a name).
_SPELLING_WORDS: dict[str, str] = {
    w: w[0]
    for w in str.split(
        "alpha alfa bravo charlie delta echo foxtrot golf hotel india juliett juliet kilo lima mike november "
        "oscar papa quebec romeo sierra tango uniform victor whiskey whisky xray x-ray yankee zulu"
    )
}
_SPELLING_WORD = "(?:" + "|".join(sorted(map(re.escape, _SPELLING_WORDS), key=len, reverse=True)) + ")"
_DIGIT_WORD = "(?:" + "|".join(sorted(_DIGIT_WORDS, key=len, reverse=True)) + ")"
# Two or more number words with separators between. Not one alone, even at the end of a text
# being drafted: "Test User One" is a name, "this one" a phrase (the first word of a spelled PIN
# may go up before the second makes a run; the rest is held).
_DIGIT_RUN = re.compile(rf"(?<![^\W\d_]){_DIGIT_WORD}(?:[\s,.;:/-]{{1,3}}{_DIGIT_WORD})+(?![^\W\d_])")
# The proper prefixes of the number words: the end of a text still being drafted ("huit trois ne"
# is "8 3" and maybe the start of "neuf").
DIGIT_WORD_PREFIXES = frozenset(w[:i] for w in _DIGIT_WORDS for i in range(1, len(w)))
DIGIT_WORDS = frozenset(_DIGIT_WORDS)
_ONE_WORD = re.compile(rf"(?<![^\W\d_]){_DIGIT_WORD}(?![^\W\d_])")
_SPELLED = rf"(?:{_SPELLING_WORD}|{_DIGIT_WORD})"
_SPELLED_RUN = re.compile(rf"(?<![^\W\d_]){_SPELLED}(?:[\s,.;:/-]{{1,3}}{_SPELLED}){{2,}}(?![^\W\d_])")
_ONE_SPELLED = re.compile(rf"(?<![^\W\d_]){_SPELLED}(?![^\W\d_])")


def _digit_words(f: Folded) -> Folded:
    """`f` with runs of number words as digits, and of the spelling alphabet's words as their
    letters, joined (step 7 of the module docstring)."""
    spelled = [
        m
        for m in _SPELLED_RUN.finditer(f.text)
        if sum(w.group() in _SPELLING_WORDS for w in _ONE_SPELLED.finditer(m.group())) >= 2
    ]
    runs = spelled + [m for m in _DIGIT_RUN.finditer(f.text) if not any(_overlap(m, s) for s in spelled)]
    if not runs:
        return f
    out = _replace_words(f, sorted(runs, key=lambda m: m.start()), _ONE_SPELLED, {**_DIGIT_WORDS, **_SPELLING_WORDS})
    # Spelled letters are single characters now: joined like letters spaced out (step 6).
    return _join_spaced(out) if spelled else out


# A run of the spelling alphabet's words at the end of a text still being drafted ("alpha", "alpha
# bravo se"): it may go on spelling a secret, and is read as letters only from its third word.
_SPELLED_TAIL = re.compile(
    rf"(?<![^\W\d_]){_SPELLING_WORD}(?:[\s,.;:/-]{{1,3}}{_SPELLED})*(?:[\s,.;:/-]{{1,3}}[a-z-]*)?\Z"
)


def spelled_tail(text: str) -> int | None:
    """Where a trailing run of spelling-alphabet words starts in lower-case `text` (its last word
    may be half written), or None."""
    m = _SPELLED_TAIL.search(text[-160:])
    if m is None:
        return None
    last = re.search(r"[a-z-]*\Z", m.group()).group()  # type: ignore[union-attr]  # always matches
    if (
        last
        and last not in _SPELLING_WORDS
        and last not in DIGIT_WORDS
        and not any(w.startswith(last) for w in (*_SPELLING_WORDS, *DIGIT_WORDS))
    ):
        return None
    return len(text) - len(text[-160:]) + m.start()


def _overlap(a: re.Match[str], b: re.Match[str]) -> bool:
    return a.start() < b.end() and b.start() < a.end()


def _replace_words(f: Folded, runs: list[re.Match[str]], word: re.Pattern[str], table: dict[str, str]) -> Folded:
    """`f` with each word of `runs` replaced by its character in `table`."""
    text: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    last = 0
    for run in runs:
        for w in word.finditer(f.text, run.start(), run.end()):
            text.append(f.text[last : w.start()])
            starts.extend(f.starts[last : w.start()])
            ends.extend(f.ends[last : w.start()])
            # The digit stands for the whole word as drafted.
            text.append(table[w.group()])
            starts.append(f.starts[w.start()])
            ends.append(f.ends[w.end() - 1])
            last = w.end()
    text.append(f.text[last:])
    starts.extend(f.starts[last:])
    ends.extend(f.ends[last:])
    return Folded(f.raw, "".join(text), tuple(starts), tuple(ends))


def fold_string(text: str) -> str:
    """Only the folded text (for registering strings the detectors then look for)."""
    return fold(text).text
