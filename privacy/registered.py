"""The forms a registered string can take on its way out, computed from the string itself.

A canary or an identity leaks just as well in another spelling: "Doe, Jane" or "J. Doe" for the
registered name "Jane Doe"; the secret "482913" of "my PIN is 482913" without its template phrase,
or as "4 8 2 9 1 3"; the base64 or hex bytes of any of them. These functions derive those forms
from what is registered (no list of attack strings), for `privacy.canaries.CanaryDetector`.
Everything here works on folded strings (`privacy.normalize.fold_string`).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import functools
import re
from collections.abc import Iterable, Mapping

from specsteer.privacy.normalize import fold_string
from specsteer.privacy.spans import clean_text

__all__ = [
    "base64_fragments",
    "common_english_words",
    "encodings",
    "name_handles",
    "name_variants",
    "secret_cores",
    "sound_key",
    "transliterate",
    "unambiguous_first_names",
    "unambiguous_surnames",
]

# English words that are also common first names: alone, they say nothing about a person.
_WORD_NAMES = frozenset(
    str.split(
        "will mark bill may june april august grant rich art pat sue bob frank jack rose lily hope faith joy "
        "dawn chase hunter summer autumn skip max ray earl rob guy sky river iris amber ruby pearl crystal "
        "victor victoria dean gene miles page reed wade lane cliff glen penny carol holly ivy jean lou "
        "don jo al ed tom van red win sam del rod gay nick chip buck rusty sandy brook jay matt dick "
        "john james paul david michael"
    )
)


def name_variants(name: str) -> set[str]:
    """ "jane q. doe" -> {"jane q. doe", "doe, jane", "doe jane", "j. doe", "jane doe", "doe, j.",
    "jane.doe", "jane_doe", "doe.jane", "doe_jane", and "janedoe", "jane-doe" where no word could be
    meant}: the written forms and the handles (`@janedoe`) a developer's text names people by. Not
    "jdoe": an initial and a surname is too often a word ("S. Hall" is "shall", "W. Hen" is "when")."""
    words = name.split()
    if len(words) < 2:
        return {name}
    first, last = words[0], words[-1]
    initial = first[0]
    out = {
        name,
        f"{first} {last}",
        f"{last}, {first}",
        f"{last} {first}",
        f"{initial}. {last}",
        f"{initial}.{last}",
        f"{last}, {initial}.",
        f"{first}.{last}",
        f"{first}_{last}",
        f"{last}.{first}",
        f"{last}_{first}",
    }
    # Joined, a name may be a word ("Frank Lin" is "franklin", "Will Power" "willpower", "Max Well"
    # "maxwell"): only a first name that is no word (`_WORD_NAMES`) joins its surname.
    if first.lower() not in _WORD_NAMES and len(first) >= 3 and len(last) >= 3:
        out |= {f"{first}{last}", f"{first}-{last}"}
    if len(words) > 2:
        out.add(f"{last}, {' '.join(words[:-1])}")
    return out


def unambiguous_first_names(names: Iterable[str], common: Iterable[str] = ()) -> set[str]:
    """First names that identify one registered person (`_unambiguous`)."""
    return _unambiguous([n.split()[0] for n in names if len(n.split()) >= 2], common)


def unambiguous_surnames(names: Iterable[str], common: Iterable[str] = ()) -> set[str]:
    """Surnames that identify one registered person, by the first names' rule (`_unambiguous`)."""
    return _unambiguous([n.split()[-1] for n in names if len(n.split()) >= 2], common)


def _unambiguous(parts: list[str], common: Iterable[str]) -> set[str]:
    """The parts of 3+ letters that no other registered name shares and that are no word
    (`_WORD_NAMES`, a common English word of `common_english_words`, or one of `common`: what the
    history writes in lower case). "Black" of "Mark Black" alone is the colour ("Run Black", "Black
    formats it") as often as the person; the whole name is still found."""
    words = {w.lower() for w in common} | _WORD_NAMES | common_english_words()
    return {p for p in parts if len(p) >= 3 and p.isalpha() and parts.count(p) == 1 and p.lower() not in words}


@functools.lru_cache(maxsize=1)
def common_english_words() -> frozenset[str]:
    """2,048 common English words: BIP-39's English list (the `mnemonic` package's, a dependency
    already), chosen for being everyday words ("black", "young", "stone", "price", "rose")."""
    from mnemonic import Mnemonic

    return frozenset(Mnemonic("english").wordlist)


def name_handles(name: str, common: Iterable[str] = ()) -> set[str]:
    """Logins a name makes that `name_variants` leaves out: initial + surname ("mvanterpool"),
    first name + initial ("maelisv", "maelis.v"), only where the parts are no words (`common`,
    `_WORD_NAMES`) and long enough that the join is no word either: "S. Hall" is "shall", "W. Hen"
    "when", so a surname of five letters or more."""
    words = name.split()
    if len(words) < 2:
        return set()
    first, last = words[0], words[-1]
    skip = {w.lower() for w in common} | _WORD_NAMES
    out: set[str] = set()
    if last.isalpha() and len(last) >= 5 and last.lower() not in skip:
        out.add(f"{first[0]}{last}")
    if first.isalpha() and len(first) >= 4 and first.lower() not in skip:
        out |= {f"{first}{last[0]}", f"{first}.{last[0]}"}
    return out


_CORE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9]")


def secret_cores(canary: str) -> set[str]:
    """The part of a canary that is secret, without its template phrase ("my pin is 482913" -> "482913").

    A word with a digit in it and 4+ characters is a secret; a canary without one is its own core.
    """
    cores = {w for w in _CORE.findall(canary) if len(w) >= 4 and any(c.isdigit() for c in w)}
    return cores or {canary}


def base64_fragments(data: bytes) -> set[str]:
    """The base64 characters that `data` fixes wherever it sits in a longer encoded byte string.

    base64 turns 3 bytes into 4 characters, so a string's encoding depends on its offset mod 3
    within the encoded input. For each offset, only the characters whose 6 bits all come from
    `data` are kept; one of the three then occurs in any encoding that contains `data`.
    """
    out: set[str] = set()
    for offset in range(3):
        padded = b"\0" * offset + data + b"\0\0\0"
        enc = base64.b64encode(padded).decode()
        lo = -(-8 * offset // 6)  # first character that starts at or after the data's first bit
        hi = (8 * (offset + len(data))) // 6  # characters ending at or before its last bit
        frag = enc[lo:hi]
        if len(frag) >= 6:
            out.add(frag)
            out.add(frag.translate(str.maketrans("+/", "-_")))  # the URL-safe alphabet
    return out


# The characters of a base64 or hex encoding, as the folded text spells them.
ENCODED_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+/=_-")


def widen_encoded(text: str, start: int, end: int) -> tuple[int, int]:
    """A match of a registered encoding widened to the whole run of encoding characters around it:
    the span covers the encoded token as written, not only the part that matched."""
    while start > 0 and text[start - 1] in ENCODED_CHARS:
        start -= 1
    while end < len(text) and text[end] in ENCODED_CHARS:
        end += 1
    return start, end


def encodings(strings: Mapping[str, str], *, min_len: int = 6) -> dict[str, str]:
    """{encoded form: kind} for each registered string of `min_len`+ characters: hex and base64,
    and the string reversed and in ROT13 (folded).

    Matched as folded (lower-case) substrings: hex case does not matter, and a base64 fragment of
    8+ characters matching in another case by chance is as unlikely as any 40-bit collision.
    """
    out: dict[str, str] = {}
    for text, kind in strings.items():
        if len(text) < min_len:
            continue
        forms = {text, text.replace(" ", "")}
        # Written backwards or in ROT13 a string is as readable as it is: registered as folded
        # text, matched like an encoding (a substring of the folded draft).
        for form in forms:
            for other in (form[::-1], codecs.encode(form, "rot13")):
                folded = fold_string(clean_text(other))
                if folded != fold_string(clean_text(form)):
                    out.setdefault(folded, kind)
        for form in forms:
            # A lone surrogate has no UTF-8 bytes; encoded as U+FFFD, as a tokenizer would see it.
            data = clean_text(form).encode()
            out.setdefault(binascii.hexlify(data).decode(), kind)
            for frag in base64_fragments(data):
                out.setdefault(frag.lower(), kind)
    return out


# Cyrillic and Greek letters as they are romanized (after `fold`, which has already turned the
# letters that look Latin into their look-alikes: "а" is "a", "с" is "c", "р" is "p", "н" is "h").
# A name written in another script ("Алиса", "Μάρκος") is that name: transliterated, it is
# compared by its sound (`sound_key`), since romanizations differ ("Alisa" for "Alice").
_TRANSLIT = {
    # Cyrillic
    "б": "b", "в": "v", "г": "g", "д": "d", "ж": "zh", "з": "z", "и": "i", "й": "i", "л": "l",
    "п": "p", "ф": "f", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "shch", "ъ": "", "ы": "y", "ь": "",
    "э": "e", "ю": "yu", "я": "ya", "є": "ye", "ґ": "g", "ў": "u", "љ": "lj", "њ": "nj", "џ": "dzh",
    "ђ": "dj", "ћ": "c", "ѓ": "gj", "ќ": "kj",
    # Greek
    "δ": "d", "ζ": "z", "η": "i", "θ": "th", "λ": "l", "μ": "m", "ξ": "x", "π": "p", "σ": "s",
    "ς": "s", "φ": "f", "ψ": "ps",
}  # fmt: skip
# The look-alikes `fold` maps by their shape, read by their sound where the whole word is in
# another script ("h" of "н" is an "n", "p" of "р" an "r", "c" of "с" an "s").
_SOUND_OF_LOOKALIKE = {"h": "n", "p": "r", "c": "s", "b": "v", "y": "u", "x": "kh", "3": "z", "6": "b"}
_OTHER_SCRIPT = re.compile(r"[\u0370-\u03ff\u0400-\u04ff]")


def transliterate(raw_word: str) -> str:
    """A word written in Cyrillic or Greek, romanized (lower case; empty if it has Latin letters
    too: a mix of scripts is a homoglyph's disguise, which `fold` reads by shape)."""
    if re.search(r"[A-Za-z]", raw_word) or not _OTHER_SCRIPT.search(raw_word):
        return ""
    out = []
    for ch in fold_string(raw_word):
        out.append(_TRANSLIT.get(ch, _SOUND_OF_LOOKALIKE.get(ch, ch)))
    return "".join(out)


def sound_key(word: str) -> str:
    """A name's sound, the same for its romanizations: "alice", "alisa" -> "als"; "black", "blek"
    -> "blk"; "john", "dzhon" -> "jn". The first letter, then the consonants (vowels are what
    romanizations disagree on), after the spellings of one sound are made one."""
    w = word.lower()
    for a, b in (
        ("dzh", "j"), ("zh", "j"), ("dj", "j"), ("kh", "h"), ("ph", "f"), ("th", "t"), ("ck", "k"),
        ("ch", "k"), ("q", "k"), ("x", "ks"), ("w", "v"), ("y", "i"),
    ):  # fmt: skip
        w = w.replace(a, b)
    w = re.sub(r"c(?=[eiy])", "s", w).replace("c", "k")
    w = w[:1] + w[1:].replace("h", "")  # "john", "thomas": an h after the first letter is not heard
    w = re.sub(r"(.)\1+", r"\1", w)
    if not w:
        return ""
    return w[0] + re.sub(r"[aeiou]", "", w[1:])


# Korean surnames as they are written in Latin letters, not as the Revised Romanization spells them.
_KOREAN_SURNAMES = {"gim": ("kim",), "i": ("lee", "yi", "rhee"), "bag": ("park", "pak"), "choe": ("choi",),
                    "jeong": ("jung", "chung"), "jo": ("cho",), "gang": ("kang",), "yun": ("yoon",),
                    "jang": ("chang",), "im": ("lim",), "han": ("hahn",), "sin": ("shin",)}  # fmt: skip


def transliterations(name: str) -> set[str]:
    """A name written in another script as it is written in Latin letters (issue #49): anyascii's
    romanization ("Дмитрий Соколов" -> "Dmitriy Sokolov"), with the common spellings of its
    endings ("Dmitry", "Dmitrii"); a Chinese or Korean name's syllables joined as its given name
    is ("王秀英" -> "Wang Xiuying", "Xiuying Wang", "Wang Xiu-ying"), a Korean surname as it is
    written ("김서연" -> "Kim Seo-yeon"). Empty for a name in Latin letters (folding covers
    its accents). Arabic script loses its vowels in any romanization: no form of it is made."""
    from anyascii import anyascii

    if all(c.isascii() or not c.isalpha() or "LATIN" in _char_name(c) for c in name):
        return set()
    if any("ARABIC" in _char_name(c) or "HEBREW" in _char_name(c) for c in name):
        return set()
    latin = anyascii(name).strip()
    if not latin or not any(c.isalpha() for c in latin):
        return set()
    out = {latin}
    words = latin.split()
    syllables = [re.findall(r"[A-Z][a-z]*|[a-z]+", w) for w in words]
    if len(words) == 1 and len(syllables[0]) >= 2:
        # One word of capitalized syllables: a CJK name, surname first.
        family, given = syllables[0][0], syllables[0][1:]
        joined = given[0] + "".join(g.lower() for g in given[1:])
        hyphened = given[0] + "".join("-" + g.lower() for g in given[1:])
        families = {family, *(f.capitalize() for f in _KOREAN_SURNAMES.get(family.lower(), ()))}
        for f in families:
            out |= {f"{f} {joined}", f"{joined} {f}", f"{f} {hyphened}", f"{hyphened} {f}", f"{f} {' '.join(given)}"}
    # The ending "-iy" of Russian names is written "-y", "-i" and "-ii" as often.
    for form in list(out):
        for a, b in (("iy", "y"), ("iy", "i"), ("iy", "ii"), ("yy", "y")):
            changed = re.sub(rf"{a}\b", b, form)
            if changed != form:
                out.add(changed)
    return out


def _char_name(c: str) -> str:
    import unicodedata

    return unicodedata.name(c, "")
