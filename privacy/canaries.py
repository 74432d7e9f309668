"""Registered strings: planted canaries and the user's own identities (`CanaryDetector`), and the
identities a history's commit trailers name (`identities_from_trailers`).

A registered string is also found in the forms it takes on the way out (`privacy.registered`:
name variants, a canary's bare secret, hex and base64), on the folded text
(`privacy.normalize.fold`).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Mapping

from specsteer.privacy.normalize import DIGIT_WORD_PREFIXES, fold
from specsteer.privacy.registered import (
    encodings,
    name_handles,
    name_variants,
    secret_cores,
    sound_key,
    transliterate,
    transliterations,
    unambiguous_first_names,
    unambiguous_surnames,
    widen_encoded,
)
from specsteer.privacy.spans import CANARY, EMAIL, KINDS, NAME, Detector, Span, merge_spans

__all__ = ["CanaryDetector", "identities_from_trailers", "split_trailers"]

_TRAILER_RE = re.compile(r"^\s*[A-Za-z][A-Za-z-]*\s*:\s*(?P<name>[^<>]*?)\s*(?:<(?P<email>[^<>\s]+@[^<>\s]+)>)?\s*$")


# A trailer that names a person: Signed-off-by, Co-authored-by, Reviewed-by, ... and Cc (as git
# writes it; "CC: clang 17" is a build setting).
_IDENTITY_KEY_RE = re.compile(r"^\s*(?:[A-Za-z][A-Za-z-]*-[Bb][Yy]|Cc)\s*:")
_KEY_VALUE_RE = re.compile(r"^\s*[A-Za-z][A-Za-z0-9-]*\s*:\s*\S")
# Lines git lets stand in a trailer block: a cherry-pick note, a maintainer's bracketed note.
_BLOCK_NOTE_RE = re.compile(r"^\s*(?:\(cherry picked from commit [0-9a-f]+\)|\[[^\]]*\])\s*$")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def split_trailers(body: str) -> tuple[str, list[str]]:
    """A commit body without its trailer block, and the block's lines.

    The block is the body's last paragraph when every line of it is a `Key: value` line (or a note
    git lets stand there: "(cherry picked from commit ...)", "[name: fixed typo]") and one at
    least names a person (`Signed-off-by:`, `Co-authored-by:`, `Cc:`, ...): what `git log
    --format=%B` exports, where the trailers are part of the body. A last paragraph of other
    `Key: value` lines ("Note: ...", "CC: clang 17") is the body's own text.
    """
    text = body.replace("\r\n", "\n").rstrip()
    breaks = list(_PARAGRAPH_BREAK.finditer(text))
    start = breaks[-1].end() if breaks else 0
    lines = [line for line in text[start:].splitlines() if line.strip()]
    if not lines or not all(_KEY_VALUE_RE.match(line) or _BLOCK_NOTE_RE.match(line) for line in lines):
        return body, []
    if not any(_IDENTITY_KEY_RE.match(line) for line in lines):
        return body, []
    return text[: breaks[-1].start()].rstrip() if breaks else "", lines


def identities_from_trailers(trailers: Iterable[str]) -> dict[str, str]:
    """Names and emails in trailer lines such as `Signed-off-by: Name <email>`, as {string: kind}.

    Names shorter than two words are skipped: a single first name ("Jeff") is too common a word to
    redact everywhere, and the guard would then hold at every capitalized word.
    """
    out: dict[str, str] = {}
    for line in trailers:
        m = _TRAILER_RE.match(line)
        if not m:
            continue
        name, email = m.group("name").strip(), m.group("email")
        if email:
            out[email] = EMAIL
        # Only a trailer that names a person gives a name ("Fixes: 1c2d (net: ...)" gives none).
        # One word is a name where it is no word of Latin letters ("王秀英", "Дмитрий"): a
        # Chinese or Korean name is one word, and there is no English word it could be.
        # One word of Latin letters is a name too where it is capitalized and no common word
        # ("Reviewed-by: Oluwaseun <...>"; not "Reviewed-by: Bot", "Tested-by: CI").
        one_word = len(name.split()) == 1 and (
            (any(c.isalpha() and not c.isascii() for c in name) and len(name) >= 2) or _latin_one_word_name(name)
        )
        if (len(name.split()) >= 2 or one_word) and "@" not in name and _IDENTITY_KEY_RE.match(line):
            out[name] = NAME
    return out


def _latin_one_word_name(word: str) -> bool:
    from specsteer.privacy.registered import _WORD_NAMES, common_english_words

    return (
        len(word) >= 4
        and word.isalpha()
        and word[0].isupper()
        and not word.isupper()
        and word.lower() not in common_english_words()
        and word.lower() not in _WORD_NAMES
        and "bot" not in word.lower()
    )


# Letters of the scripts whose names a Latin-script history quotes as they are written: Cyrillic,
# Greek, Hebrew, Arabic, Devanagari and the other Brahmic scripts, Thai, kana, CJK ideographs, Hangul.
_SCRIPTS = {
    "cased": "\u0370-\u03ff\u0400-\u04ff",
    "abjad": "\u0590-\u05ff\u0600-\u06ff",
    "brahmic": "\u0900-\u0dff\u0e00-\u0e7f",
    "syllabic": "\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af",
}
_ISLAND = {
    # Two or three words (one would be a quoted word as often as a name), each capitalized where
    # the script has case; a CJK, kana or Hangul name is one word of two to four characters.
    "cased": re.compile(
        r"(?<![^\W\d_])[\u0370-\u03ff\u0400-\u04ff]+(?:[ \t]+[\u0370-\u03ff\u0400-\u04ff]+){1,2}(?![^\W\d_])"
    ),
    "abjad": re.compile(
        r"(?<![^\W\d_])[\u0590-\u05ff\u0600-\u06ff]{2,}(?:[ \t]+[\u0590-\u05ff\u0600-\u06ff]{2,}){1,2}(?![^\W\d_])"
    ),
    "brahmic": re.compile(
        r"(?<![^\W\d_])[\u0900-\u0dff\u0e00-\u0e7f]{2,}(?:[ \t]+[\u0900-\u0dff\u0e00-\u0e7f]{2,}){1,2}(?![^\W\d_])"
    ),
    "syllabic": re.compile(r"(?<![^\W\d_])[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]{2,4}(?![^\W\d_])"),
}


def names_in_prose(text: str) -> set[str]:
    """Names a Latin-script text quotes in another script (issue #49, finding 3: "Paired with
    Алексей Морозов", "Thanks to 박지훈"): a short island of another script's words in a sentence
    of Latin letters is a name far more often than anything else, so it is registered as one. A
    text mostly in that script (a Russian commit message) registers nothing: its words are prose."""
    out: set[str] = set()
    # By words, not letters: a Devanagari syllable is several code points.
    latin = len(re.findall(r"[A-Za-z]{2,}", text))
    for group, pattern in _ISLAND.items():
        islands = len(re.findall(f"[{_SCRIPTS[group]}]+", text))
        if not islands or islands * 2 > latin:
            continue
        for m in pattern.finditer(text):
            words = m.group().split()
            if group == "cased" and not all(w[0].isupper() and len(w) >= 2 for w in words):
                continue
            # Within a line of Latin words: a line all in the other script is a quotation, not a name.
            a = text.rfind("\n", 0, m.start()) + 1
            b = text.find("\n", m.end())
            line = text[a : b if b >= 0 else len(text)]
            if sum(1 for c in line if c.isascii() and c.isalpha()) >= 6:
                out.add(m.group())
    return out


def _normalize(text: str) -> str:
    return " ".join(fold(text).text.split())


_SEPARATOR = r"[\s.\-_/,:|]{0,2}"
_LOOSE_TAIL = re.compile(r"[a-z0-9](?:[\s.\-_/,:|]{0,2}[a-z0-9])*[\s.\-_/,:|]{0,2}")


class CanaryDetector(Detector):
    """Registered strings and the forms they take on the way out, matched on the folded text.

    * the string itself, in any case, with any whitespace between words;
    * a registered name's variants ("Doe, Jane", "J. Doe", "jane.doe"), its logins ("jdoeson",
      "janed", `privacy.registered.name_handles`), backwards and in ROT13, and its first name or
      surname alone where that is unambiguous (`privacy.registered.unambiguous_first_names`,
      `unambiguous_surnames`), with a possessive or plural "s";
    * a canary's secret without its template phrase ("482913" of "my PIN is 482913"), also with
      separators between its characters ("4 8 2 9 1 3", "48-29-13");
    * the hex and base64 encodings of every registered string and secret; the whole encoded word
      around a match is the span.

    `min_prefix` is the shortest prefix (in characters, starting at a word) of a string or variant
    that makes the end of a text a hazard; a secret's prefix holds from its first character.
    `variants=False` matches the registered strings only (what a leakage report counts).
    """

    def __init__(
        self,
        strings: Mapping[str, str] | Iterable[str],
        *,
        min_prefix: int = 3,
        variants: bool = True,
        common_words: Iterable[str] = (),
    ) -> None:
        items = strings.items() if isinstance(strings, Mapping) else ((s, CANARY) for s in strings)
        raw: dict[str, str] = {}
        self.strings: dict[str, str] = {}
        for s, kind in items:
            if kind not in KINDS:
                raise ValueError(f"unknown kind {kind!r} for a registered string")
            if s.strip():
                raw[s.strip()] = kind
                self.strings[_normalize(s)] = kind
                if kind == NAME and variants:
                    # The name as it is written in Latin letters, registered with it (issue #49);
                    # a Latin name's letters that folding keeps ("ø", "æ", "ł") as ASCII too
                    # ("Øystein Brænne" is typed "Oystein Braenne").
                    for t in transliterations(s):
                        self.strings.setdefault(_normalize(t), NAME)
                    if not s.isascii() and not transliterations(s):
                        from anyascii import anyascii

                        self.strings.setdefault(_normalize(anyascii(s)), NAME)
        exact = dict(self.strings)
        cores: set[str] = set()
        firsts: set[str] = set()
        encoded: dict[str, str] = {}
        if variants:
            names = [n for n, kind in self.strings.items() if kind == NAME]
            for n in names:
                for v in name_variants(n):
                    exact.setdefault(v, NAME)
            common = {w.lower() for w in common_words}
            firsts = unambiguous_first_names(names, common)
            # The surname alone names the person as well ("Reviewed by Vanterpool"), by the same
            # rule: not a word the history writes in lower case.
            firsts |= unambiguous_surnames(names, common)
            for n in names:
                for handle in name_handles(n, common):
                    exact.setdefault(handle, NAME)
            raw_cores = {c: CANARY for s, kind in raw.items() if kind == CANARY for c in secret_cores(s)}
            cores = {c for c in map(_normalize, raw_cores) if " " not in c}
            # A secret written backwards ("319284" for "482913") is still the secret: the
            # reversed core is a core too (found with separators, held from its first digit).
            cores |= {c[::-1] for c in cores}
            # A name backwards or in ROT13 reads as plainly ("loopretnav sileam").
            for n in names:
                for other in (n[::-1], codecs.encode(n, "rot13")):
                    exact.setdefault(_normalize(other), NAME)
            encoded = encodings({**raw, **raw_cores})
        self.exact = exact
        self.first_names = frozenset(firsts) if variants else frozenset()
        # A name written in Cyrillic or Greek ("Алиса Уокер", "Алиса" alone where "Alice" is
        # unambiguous): by the sound of its romanization (`privacy.registered.sound_key`).
        self._sounds: set[str] = set()
        self._sound_pairs: set[tuple[str, str]] = set()
        if variants:
            self._sounds = {k for n in self.first_names if len(k := sound_key(n)) >= 3}
            for n, kind in self.strings.items():
                if kind == NAME and len(n.split()) >= 2:
                    self._sound_pairs.add((sound_key(n.split()[0]), sound_key(n.split()[-1])))
        # A name registered in another script, written in Latin letters the way a colleague
        # spells it ("Alexei" or "Aleksey" for "Алексей", "Mohammed Al-Qahtani" for "محمد
        # القحطاني", "Verma" for "वर्मा"): two capitalized words whose sounds (`latin_key`) are
        # those of its romanization's first and last word, in either order.
        self._latin_pairs: set[tuple[str, str]] = set()
        if variants:
            for s_raw, kind in raw.items():
                if kind != NAME or not any(c.isalpha() and "LATIN" not in _char_name(c) for c in s_raw):
                    continue
                for t in {*transliterations(s_raw), *arabic_romanizations(s_raw)}:
                    words = t.replace("-", "").split()
                    if len(words) >= 2:
                        k1, k2 = latin_key(words[0]), latin_key(words[-1])
                        if len(k1) >= 2 and len(k2) >= 2:
                            self._latin_pairs |= {(k1, k2), (k2, k1)}
        # With a possessive or plural "s" ("Vanterpool's", "die Vanterpools").
        self._first_re = _alternation(self.first_names, _name_pattern)
        self.cores = frozenset(cores)
        self.encoded = encoded
        self.min_prefix = min_prefix
        self._exact_re = _alternation(exact, _word_pattern)
        self._core_re = _alternation(cores, _loose_pattern)
        self._encoded_re = _alternation(encoded, re.escape)
        # An encoding longer than the device's look-ahead reaches the guard in pieces after a
        # fail-closed hold: any 16 characters of one are a span too.
        pieces = {e[i : i + 16]: kind for e, kind in encoded.items() for i in range(0, len(e) - 15, 2)}
        self._piece_kinds = pieces  # a piece of a name's form is a name, not a canary
        self._piece_re = _alternation(pieces, re.escape)
        self._prefixes: dict[str, str] = {}
        self._non_latin = any(_NON_LATIN.match(n) for n, kind in exact.items() if kind == NAME)
        for norm, kind in [*exact.items(), *((name, NAME) for name in self.first_names)]:
            # A name in a script without case is held from its first character: a CJK or Hangul
            # character is a syllable, and folding drops the vowel signs of Devanagari or Arabic.
            shortest = 1 if _NON_LATIN.match(norm) else min_prefix
            for length in range(min(shortest, len(norm)), len(norm)):
                self._prefixes.setdefault(norm[:length], kind)
        self._core_prefixes = {c[:n] for c in cores for n in range(1, len(c))}
        self._max_core = max(map(len, cores), default=0)
        self._encoded_prefixes = {e[:n] for e in encoded for n in range(min(6, len(e)), len(e))}
        self._max_len = max((len(s) for s in (*exact, *encoded)), default=0) + 2 * max(map(len, cores), default=0)

    def find(self, text: str) -> list[Span]:
        f = fold(text)
        t = f.text
        out: list[Span] = []
        if self._exact_re is not None:
            for m in self._exact_re.finditer(t):
                out.append(Span(*f.span(m.start(), m.end()), self.exact.get(" ".join(m.group().split()), CANARY)))
        if self._first_re is not None:
            # A first name alone is a name only where it is written as one: "Jane", "JANE", not "jane".
            for m in self._first_re.finditer(t):
                a, b = f.span(m.start(), m.end())
                # ... or as a login in any case: "maelis@host", "/home/maelis".
                login = text[b : b + 1] == "@" or text[a - 1 : a] == "/"
                if text[a].isupper() or login:
                    out.append(Span(a, b, NAME))
        if self._sounds or self._sound_pairs:
            out += self._transliterated(text)
        if self._latin_pairs:
            for m in _LATIN_PAIR.finditer(text):
                if (latin_key(m.group(1)), latin_key(m.group(2))) in self._latin_pairs:
                    out.append(Span(m.start(1), m.end(2), NAME))
        if self._core_re is not None:
            out += [Span(*f.span(m.start(), m.end()), CANARY) for m in self._core_re.finditer(t)]
        for pattern in (self._encoded_re, self._piece_re):
            if pattern is None:
                continue
            for m in pattern.finditer(t):
                out.append(
                    Span(
                        *f.span(*widen_encoded(t, m.start(), m.end())),
                        self.encoded.get(m.group()) or self._piece_kinds.get(m.group(), CANARY),
                    )
                )
        return merge_spans(out)

    def _transliterated(self, text: str) -> list[Span]:
        """Registered names written in Cyrillic or Greek (see `__init__`)."""
        out: list[Span] = []
        words = [(m, sound_key(transliterate(m.group()))) for m in _OTHER_SCRIPT_WORD.finditer(text)]
        for i, (m, key) in enumerate(words):
            if not m.group()[0].isupper() or not key:
                continue
            if key in self._sounds:
                out.append(Span(m.start(), m.end(), NAME))
            if i + 1 < len(words):
                nxt, key2 = words[i + 1]
                if (key, key2) in self._sound_pairs and not text[m.end() : nxt.start()].strip(" \t,."):
                    out.append(Span(m.start(), nxt.end(), NAME))
        return out

    def hazard(self, text: str) -> Span | None:
        # A character still incomplete (a token ends inside its UTF-8 bytes: "\ufffd") cannot be
        # judged yet; where a name in another script is registered it may be that name's first.
        if text.endswith("\ufffd") and self._non_latin:
            stripped = text.rstrip("\ufffd")
            before = self.hazard(stripped)
            return Span(before.start if before is not None else len(stripped), len(text), NAME)
        if self._sounds or self._sound_pairs:
            # A capitalized Cyrillic or Greek word at the end may still become a registered name.
            # (A first name's word followed by the start of its surname: from the first name.)
            tail = text[-60:]
            m = re.search(
                r"(?<![^\W\d_])(?:(?P<first>[\u0370-\u03ff\u0400-\u04ff]+)[ \t]+)?"
                r"(?P<last>[\u0370-\u03ff\u0400-\u04ff]+)[ \t]?\Z",
                tail,
            )
            if m is not None:
                key = sound_key(transliterate(m.group("last")))
                firsts = self._sounds | {a for a, _ in self._sound_pairs}
                if m.group("first") and m.group("first")[0].isupper():
                    first = sound_key(transliterate(m.group("first")))
                    if key and any(a == first and b.startswith(key) for a, b in self._sound_pairs):
                        return Span(len(text) - len(tail) + m.start(), len(text), NAME)
                if m.group("last")[0].isupper() and key and any(k.startswith(key) for k in firsts):
                    return Span(len(text) - len(tail) + m.start("last"), len(text), NAME)
        latin = self._latin_hazard(text) if self._latin_pairs else None
        registered = self._registered_hazard(text)
        if latin is not None and (registered is None or latin.start < registered.start):
            return latin
        return registered

    def _latin_hazard(self, text: str) -> Span | None:
        """A capitalized word at the end whose sound begins a registered pair's first word (or a
        pair's first word, then the start of its second): it may still become the name."""
        tail = text[-60:]
        m = re.search(r"(?<![^\W\d_])(?:(?P<first>[A-Z][\w'-]*)[ \t]+)?(?P<last>[A-Z][\w'-]*)[ \t]?\Z", tail)
        if m is None or not m.group("last").isascii():
            return None
        key = latin_key(m.group("last"))
        if m.group("first") and key:
            first = latin_key(m.group("first"))
            if any(a == first and b.startswith(key) for a, b in self._latin_pairs):
                return Span(len(text) - len(tail) + m.start(), len(text), NAME)
        if len(m.group("last")) >= 2 and key and any(a.startswith(key) for a, _ in self._latin_pairs):
            return Span(len(text) - len(tail) + m.start("last"), len(text), NAME)
        return None

    def _registered_hazard(self, text: str) -> Span | None:
        if not (self._prefixes or self._core_prefixes or self._encoded_prefixes):
            return None
        offset = max(0, len(text) - 2 * self._max_len - 8)
        f = fold(text[offset:])
        tail = f.text
        best: int | None = None
        kind_at: str = CANARY
        if self._prefixes:
            for m in re.finditer(r"(?<!\w)\w|(?<=\s)[^\w\s]|^[^\w\s]", tail):
                candidate = " ".join(tail[m.start() :].split())
                # A trailing space is kept: "test user " is still a prefix of "test user one".
                if tail.endswith((" ", "\n")) and candidate:
                    candidate += " "
                kind = self._prefixes.get(candidate)
                if kind is not None:
                    best, kind_at = m.start(), kind
                    break
        if self._core_prefixes:
            # "4 8 2" at the end may still become "4 8 2 9 1 3": from the earliest start that fits.
            for m in re.finditer(r"(?<![a-z0-9])[a-z0-9]", tail[-3 * self._max_core - 3 :] if self._max_core else ""):
                start = m.start() + max(0, len(tail) - 3 * self._max_core - 3)
                rest = tail[start:]
                # A number word half written after digits ("8 3 3 ne" of "huit trois trois neuf")
                # may be the next digit: judged without it.
                partial = re.search(r"(?<=[\s.\-_/,:|])[a-z]+\Z", rest)
                if partial and partial.group() in DIGIT_WORD_PREFIXES and re.search(r"\d", rest[: partial.start()]):
                    rest = rest[: partial.start()]
                if _LOOSE_TAIL.fullmatch(rest) and re.sub(r"[\s.\-_/,:|]", "", rest) in self._core_prefixes:
                    if best is None or start < best:
                        best, kind_at = start, CANARY
                    break
        if self._encoded_prefixes:
            # Any trailing run without spaces (a string reversed or in ROT13 keeps its symbols).
            run = re.search(r"\S+\Z", tail)
            if run:
                word = run.group()
                for i in range(len(word)):
                    if word[i:] in self._encoded_prefixes:
                        start = run.start() + i
                        if best is None or start < best:
                            best, kind_at = start, CANARY
                        break
        return None if best is None else Span(offset + f.raw_start(best), len(text), kind_at)


# Two capitalized words of Latin letters (a hyphen inside: "Ji-hoon", "Al-Qahtani").
_LATIN_WORD = r"((?:[ae]l-[A-Z]|[A-Z])[A-Za-z'-]*[a-z])"
_LATIN_PAIR = re.compile(r"(?<![\w-])(?=" + _LATIN_WORD + r"[ \t]+" + _LATIN_WORD + r"(?![\w-]))")


_NON_LATIN = re.compile("[\u0590-\u06ff\u0900-\u0e7f\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")


def latin_key(word: str) -> str:
    """The sound of a name's word in Latin letters, as its romanizations share it: without hyphens
    or an Arabic article ("Al-Qahtani", "Almutairi": "al" before a consonant), an "m" before a
    consonant read as the "n" it is in Hindi's anusvara ("Ankit", "amkit"), then `sound_key`."""
    w = re.sub(r"'s\Z", "", word.lower()).replace("-", "").replace("'", "")  # "Varma's" is Varma
    w = re.sub(r"\A(?:al|el)(?=[^aeiouy])", "", w) if len(w) > 5 else w
    w = re.sub(r"(?<=[aeiou])m(?=[kgtdcjsz])", "n", w)
    # Without vowels a doubled consonant is one ("mhmd" of "محمد", "Mohammed"); a "." keeps
    # apart the letters of two Arabic ones ("z.h" of "زه" is no "zh").
    return re.sub(r"(.)\1+", r"\1", sound_key(w).replace(".", ""))


def arabic_romanizations(name: str) -> set[str]:
    """An Arabic-script name in Latin letters for `latin_key` (vowels are what romanizations
    disagree on, and the key has none): anyascii of each word, without its article "ال"."""
    if not any("ARABIC" in _char_name(c) for c in name):
        return set()
    from anyascii import anyascii

    words = [".".join(anyascii(c) for c in (w[2:] if w.startswith("ال") and len(w) > 3 else w)) for w in name.split()]
    return {" ".join(words)} if all(words) else set()


def _char_name(c: str) -> str:
    import unicodedata

    return unicodedata.name(c, "")


# A word in Cyrillic or Greek letters (with their accents).
_OTHER_SCRIPT_WORD = re.compile(r"[\u0370-\u03ff\u0400-\u04ff\u0300-\u036f]+")


def _word_pattern(norm: str) -> str:
    body = r"\s+".join(re.escape(w) for w in norm.split(" "))
    # Word boundaries only where the string itself starts or ends with a word character,
    # so "user.one@example.invalid" still matches inside "<user.one@example.invalid>".
    left = r"(?<!\w)" if norm[0].isalnum() or norm[0] == "_" else ""
    right = r"(?!\w)" if norm[-1].isalnum() or norm[-1] == "_" else ""
    return f"{left}{body}{right}"


def _name_pattern(norm: str) -> str:
    return f"(?<!\\w){re.escape(norm)}(?:'?s)?(?!\\w)"


def _loose_pattern(core: str) -> str:
    return r"(?<![a-z0-9])" + _SEPARATOR.join(re.escape(c) for c in core) + r"(?![a-z0-9])"


def _alternation(strings: Iterable[str], pattern: Callable[[str], str]) -> re.Pattern[str] | None:
    ordered = sorted(set(strings), key=len, reverse=True)
    return re.compile("|".join(pattern(s) for s in ordered)) if ordered else None
