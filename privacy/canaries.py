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
        one_word = len(name.split()) == 1 and any(c.isalpha() and not c.isascii() for c in name) and len(name) >= 2
        if (len(name.split()) >= 2 or one_word) and "@" not in name and _IDENTITY_KEY_RE.match(line):
            out[name] = NAME
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
                    # The name as it is written in Latin letters, registered with it (issue #49).
                    for t in transliterations(s):
                        self.strings.setdefault(_normalize(t), NAME)
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
        for norm, kind in [*exact.items(), *((name, NAME) for name in self.first_names)]:
            for length in range(min(min_prefix, len(norm)), len(norm)):
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
        return self._registered_hazard(text)

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
