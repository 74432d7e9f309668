"""Every secret the user's own history shows, registered (`HistorySecretDetector`, issue 30).

A history holds what a developer once pasted: a database password in a `.env` snippet, a cloud
key pair in a profile, a bot token in a sentence. The verbatim-history rule does not see them (one
identifier of 8-15 tokens is not a passage, by design), and they are not registered canaries. So
the device registers them from the history itself: every value `privacy.recognizers.secret_values`
finds there (vendor keys, keyword values, JWT parts, private-key bodies, random-looking words), and
hex strings of 20+ characters that a secret-sounding word introduces ("token 3f9a...", which alone
would read as a commit hash).

A registered secret is found:

* whole, or any piece of it of `min_piece`+ characters that is not a plain word (a piece has a
  digit or a symbol, or is 10+ characters): the first third of a key, a password split in two;
* as hex or base64 of itself at any byte offset (`privacy.registered.encodings`: also inside
  "Basic " + base64 of "user:token");
* split into words with text between ("Note aD6; the rest is IA5+~nOp"): a word of `min_part`+
  characters that starts a secret (or is a piece of one and has a digit or a symbol), followed
  within `split_gap` characters by words that go on with the secret where it stopped, until the
  parts make a piece (`min_piece`+ characters): each part is a span, however short (a part alone
  says little; together they are the key);

all on the folded text (case does not hide a secret). Its hazard holds a trailing run that is
still a piece of a secret (from two characters), the start of one of its encodings, and a recent
word that may be a split secret's first part, for `split_gap` characters: the rest may follow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from specsteer.privacy.normalize import fold
from specsteer.privacy.recognizers import secret_values
from specsteer.privacy.registered import encodings, widen_encoded
from specsteer.privacy.spans import SECRET, Detector, Span, merge_spans

__all__ = ["HistorySecretDetector", "history_secrets"]

_INTRODUCED_HEX = re.compile(
    r"(?i)\b(?:token|secret|key|password|passwd|pwd|credentials?|bearer|auth(?:orization|entication)?)\W{1,3}"
    r"(?:\w+\W{1,3}){0,2}?"
    r"(?P<value>[0-9a-f]{20,})(?![0-9a-z])"
)


# Secrets a history states in prose, by a keyword and the shape after it (issue #49): "password is
# X", "password: X", "pw X", "PIN: 4417", "alarm code 4417", "passphrase: four plain words",
# "KEY=value" where the key names a secret, "admin / Sunflower!1987" after a login word. Each value
# is registered whole (never a prefix the keyword shares with prose).
_IS = r"(?:[ \t]*(?:is|was|=|:|->)[ \t]*|[ \t]+)[\"'`]?"
# Between a keyword and its "is"/":" a note may name where or what it is for, in up to three
# words or a parenthesis: "the wifi password there is X", "password for the NAS: X", "passphrase
# (keep the card in the drawer): X". Only before a strict separator: without one, the words after
# a keyword are the sentence's.
_WHERE = r"(?:[ \t]+(?!(?:is|was)\b)[\w.-]{1,16}){0,3}?(?:[ \t]*\([^)\n]{0,80}\))?"
_PROSE_PASSWORD = re.compile(
    r"(?i)(?<![\w-])(?:pass(?:word|wd)s?|pwd|pw|kennwort|passwort|mot de passe|contrase[nñ]a|senha"
    r"|wi-?fi(?:[ \t]+(?:key|code|pass|pw))?|wlan|wpa2?[ \t]+key|network[ \t]+key)"
    r"(?:(?P<strict>" + _WHERE + r"[ \t]*(?:is|was|=|:|->)[ \t]*)|[ \t]+)[\"'`]?(?P<value>[^\s\"'`]{6,64})"
)
_PROSE_PIN = re.compile(
    r"(?i)(?<![\w-])(?:pin|passcode|(?:alarm|door|gate|garage|safe|lock|keypad|entry|access|security|lockbox|locker)"
    r"[ \t]+(?:code|pin|combo|combination))(?:[ \t]*(?:number|no\.?|#))?"
    + _IS
    + r"(?P<value>\d{4,8})(?![\w/:-]|[.,]\d)"
)
_PROSE_PASSPHRASE = re.compile(
    r"(?i)(?<![\w-])pass[ -]?phrase" + _WHERE + r"(?:[ \t]*(?:is|was|=|:|->)[ \t]*)[\"'`]?"
    r"(?P<value>[a-z]{2,12}(?:[ \t-][a-z]{2,12}){2,7})(?![\w])"
)
_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "to",
        "of",
        "in",
        "on",
        "at",
        "by",
        "for",
        "from",
        "with",
        "and",
        "or",
        "but",
        "not",
        "no",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
        "if",
        "then",
        "than",
        "so",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
        "may",
        "must",
        "see",
        "set",
        "stored",
        "kept",
        "saved",
        "in",
        "into",
        "our",
        "your",
        "my",
        "their",
        "his",
        "her",
    ]
)
_PROSE_ASSIGNMENT = re.compile(
    r"(?<![\w.-])(?:export[ \t]+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*[\"']?(?P<value>[^\s\"'`]{6,128})"
)
_SECRET_KEY_WORDS = frozenset(
    ["token", "secret", "password", "passwd", "pass", "pwd", "key", "apikey", "passphrase", "credential", "credentials"]
)
_LOGIN_PAIR = re.compile(
    r"(?i)(?<![\w-])(?:admin|login|user(?:name)?|account|root)\b[^\n/]{0,24}?(?<![\w])(?P<user>[\w.@-]{2,40})?"
    r"[ \t]*/[ \t]*(?P<value>[^\s/\"'`]{6,64})"
)


def _overlapping(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """Every match of `pattern`, one from each start: "Wifi at the cabin: password is X" holds a
    keyword ("password") inside the first keyword's match ("Wifi at the cabin: password")."""
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        yield m
        pos = m.start() + 1


def prose_secrets(text: str) -> set[str]:
    """The secrets `text` states in prose (see `_PROSE_PASSWORD` and the patterns after it), as written."""
    from specsteer.privacy.recognizers import _names_a_secret, _password_ok, _pin_ok, _strong_password_ok

    out: set[str] = set()
    for m in _overlapping(_PROSE_PASSWORD, text):
        value = m.group("value").rstrip(".,;:)")
        ok = _password_ok if m.group("strict") else _strong_password_ok
        if ok(value):
            out.add(value)
    for m in _PROSE_PIN.finditer(text):
        if _pin_ok(m.group("value")):
            out.add(m.group("value"))
    for m in _PROSE_PASSPHRASE.finditer(text):
        # "passphrase: is set in the config" is a sentence: a passphrase's words are no function words.
        if not set(re.split(r"[ \t-]+", m.group("value").lower())) & _FUNCTION_WORDS:
            out.add(m.group("value"))
    for m in _PROSE_ASSIGNMENT.finditer(text):
        words = [w for w in re.split(r"_+", m.group("key").lower()) if w]
        value = m.group("value").rstrip(".,;:)")
        if words and _SECRET_KEY_WORDS & set(words) and _names_a_secret(m.group("key"), 0) and _password_ok(value):
            out.add(value)
    for m in _LOGIN_PAIR.finditer(text):
        value = m.group("value").rstrip(".,;:)")
        if _strong_password_ok(value):
            out.add(value)
    # An identifier's name after "password:" ("MAX_RETRY_COUNT2", "SHA256_DIGEST") names a thing.
    return {v for v in out if not _NAME.fullmatch(v) and not re.fullmatch(r"[A-Z0-9]+(?:_[A-Z0-9]+)+", v)}


def history_secrets(history: Iterable[str]) -> set[str]:
    """The secrets a history shows (see the module docstring), as written."""
    out: set[str] = set()
    for text in history:
        for a, b in secret_values(text):
            value = text[a:b].strip()
            if _secret_like(value):
                out.add(value)
        out.update(m.group("value") for m in _INTRODUCED_HEX.finditer(text))
        out |= prose_secrets(text)
    return out


# What a secret shares with every other of its kind, no secret alone: a URL's scheme, host and
# plain path words ("https://hooks.slack.com/services/"), a vendor's prefix ("ghp_", "github_pat_",
# "xoxb-", "sk-proj-", "AKIA"). A piece or part of a secret must reach past it.
_URL_PREFIX = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s]*/(?:[a-z]+(?:[._-][a-z]+)*/)*")
# Only before a long generated run: "fjordlys-" of a password, "granite-plum-" of a passphrase is no vendor's.
_VENDOR_PREFIX = re.compile(r"(?:[a-z]{2,10}[_-]){1,3}(?=(?=[a-z_-]*\d)[a-z0-9_-]{16,}\Z)|akia|asia|aiza|eyj|sg\.")


def generic_prefix(secret: str) -> int:
    """The length of `secret`'s (folded) generic prefix (see `_URL_PREFIX`); 0 if none."""
    m = _URL_PREFIX.match(secret) or (_VENDOR_PREFIX.match(secret) if len(secret) >= 20 else None)
    return m.end() if m and m.end() < len(secret) else 0


_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z]+)+")


def _secret_like(value: str) -> bool:
    """A value worth registering: not a setting ("HASH=sha256"), an option ("--quiet"), a word
    ("password") or an identifier's name (MAX_RETRIES, user_id_2, camelCase), but 8+ characters of
    at least two kinds, five of them distinct."""
    if len(value) < 8 or value.startswith("-") or re.match(r"[A-Za-z_][\w.-]*=", value) or len(set(value)) < 5:
        return False
    # Names join words with underscores or capitals; a key of one case and digits does not (an AWS
    # access key, AKIA + 16 upper-case letters and digits, was skipped as a constant's name).
    if _NAME.fullmatch(value):
        return False
    kinds = [r"[a-z]", r"[A-Z]", r"\d", r"[^A-Za-z0-9]"]
    return sum(bool(re.search(k, value)) for k in kinds) >= 2


# The characters around a word that are punctuation of the sentence, not of the secret: a part is
# tried as written and without them ("aD6;" is "aD6").
_OPENING = "([{<\"'`"
_CLOSING = ".,;:!?)]}>\"'`"
# Words are looked at twice: between spaces, and also split at any other character that is neither
# a letter nor a digit, so a key written in groups ("AKIA-Z7Q2-LMXW-...", "AKIA_Z7Q2_...") is a
# split secret like one in groups between spaces. A separator that the secret itself has must then
# stand in the text too (`_continue`).
_COARSE = re.compile(r"\S+")
_FINE = re.compile(r"[^\W_]+")
_LEADING_SYMBOLS = re.compile(r"[\W_]*")

Words = list[list[tuple[int, int]]]

_HEAD = 6  # the shortest registered encoding (`privacy.registered.encodings`)
_PIECE = 16  # a piece of a long encoding that is a span on its own


def _segmentations(text: str) -> Iterator[tuple[Words, bool]]:
    """The words of `text` between spaces, then split at symbols too (`fine`)."""
    yield _words(text, _COARSE), False
    yield _words(text, _FINE), True


def _words(text: str, word: re.Pattern[str]) -> Words:
    """For each word of `text`, the ranges it may stand for: as written, without the sentence's
    punctuation around it, the longest first."""
    out = []
    for m in word.finditer(text):
        a, b = m.span()
        forms = {(a, b)}
        a2 = a + len(m.group()) - len(m.group().lstrip(_OPENING))
        b2 = b - (len(m.group()) - len(m.group().rstrip(_CLOSING)))
        forms |= {(a2, b), (a, b2), (a2, b2)}
        out.append(sorted((f for f in forms if f[1] > f[0]), key=lambda r: r[0] - r[1]))
    return out


def _is_piece(piece: str, whole: str) -> bool:
    """A piece of a secret worth a span: the whole secret, 10+ characters, or one with a digit or
    symbol; of a passphrase (words between spaces), two of its words at least; and half of a
    secret or more that is no common word ("sunflow" of "sunflower!1987")."""
    if piece == whole:
        return True
    if " " in whole:
        words = piece.split()
        return len(words) >= 2 and all(w in whole.split() for w in words)
    # A word the secret has whole ("sunflower" of "sunflower!1987") is prose's as well.
    if len(piece) >= 7 and 2 * len(piece) >= len(whole) and piece not in re.findall(r"[a-z]+", whole):
        return True
    return len(piece) >= 10 or bool(re.search(r"[^a-z]", piece))


class HistorySecretDetector(Detector):
    """Registered secrets of the history, whole, in pieces and encoded (see the module docstring)."""

    def __init__(self, secrets: Iterable[str], *, min_piece: int = 6, min_part: int = 3, split_gap: int = 48) -> None:
        secrets = list(secrets)
        folded = sorted({fold(s).text for s in secrets if len(s) >= min_piece}, key=len, reverse=True)
        self.secrets = tuple(folded)
        # PINs shorter than a piece ("4417" of "alarm code 4417"): whole, with separators between
        # the digits ("4 4 1 7", "44-17"), reversed, and in hex; never a part of one.
        self.pins = tuple(sorted({s for s in secrets if len(s) < min_piece and s.isdigit() and len(s) >= 4}))
        self._pin_re = (
            re.compile(
                "|".join(
                    r"(?<![a-z0-9])" + r"[\s.\-_/,:|]{0,2}".join(p) + r"(?![a-z0-9])"
                    for pin in self.pins
                    for p in {pin, pin[::-1]}
                )
            )
            if self.pins
            else None
        )
        self._generic = {s: generic_prefix(s) for s in folded}
        self.min_piece = min_piece
        # A part of three characters is as rare in prose as a three-letter word is in a secret; two
        # would hold every "to" of a text whose user has a "to" in a password. The gap between two
        # parts stays well inside the device's look-ahead (32 tokens), so a hold on the first part
        # resolves before the look-ahead runs out.
        self.min_part = min_part
        self.split_gap = split_gap
        self._joined = "\0".join(folded)
        # Fixed-length windows in sets, not regex alternations: a history with hundreds of secrets
        # (a pasted lock file's integrity hashes) made one alternation of thousands of branches,
        # tried at every character of every round (72 ms a drafted token at 400 secrets). A set
        # lookup per position costs the same whatever the number of secrets.
        self._grams = frozenset(s[i : i + min_piece] for s in folded for i in range(len(s) - min_piece + 1))
        self.encoded = encodings({s: SECRET for s in secrets})
        for pin in self.pins:
            self.encoded.setdefault(pin.encode().hex(), SECRET)
        # Every encoding is 6+ characters (`encodings`): indexed by its first six.
        self._encoded_by_head: dict[str, list[str]] = {}
        for e in sorted(self.encoded, key=len, reverse=True):
            self._encoded_by_head.setdefault(e[:_HEAD], []).append(e)
        self._encoded_prefixes = {e[:n] for e in self.encoded for n in range(min(4, len(e)), len(e))}
        # A word that begins an encoding is held from two characters, as a piece of a secret is
        # ("re" of "reicalg norffas", a passphrase reversed); inside a word, from four.
        self._encoded_heads = {e[:n] for e in self.encoded for n in range(2, min(4, len(e)))}
        self._encoded_spaced = {e[:n] for e in self.encoded if " " in e for n in range(e.index(" ") + 1, len(e))}
        # A long encoding the look-ahead cannot hold whole reaches the guard in pieces: any 16
        # characters of one are a span too.
        self._pieces = frozenset(e[i : i + _PIECE] for e in self.encoded for i in range(0, len(e) - _PIECE + 1, 2))
        # The secrets each `min_part`-gram occurs in, so a split part is tried against the few
        # secrets that can go on after it, not all of them.
        self._by_gram: dict[str, list[int]] = {}
        for k, secret in enumerate(folded):
            for g in sorted({secret[i : i + min_part] for i in range(len(secret) - min_part + 1)}):
                self._by_gram.setdefault(g, []).append(k)

    @classmethod
    def from_history(cls, history: Iterable[str]) -> HistorySecretDetector:
        return cls(history_secrets(history))

    def __len__(self) -> int:
        return len(self.secrets) + len(self.pins)

    def _past_generic(self, piece: str, end_in: Iterable[tuple[str, int]]) -> bool:
        """Some (secret, end offset) of `piece` reaches 3+ characters past the secret's generic prefix."""
        return any(end - self._generic.get(secret, 0) >= 3 for secret, end in end_in)

    def _ends_of(self, piece: str) -> Iterator[tuple[str, int]]:
        for secret in self.secrets:
            i = secret.find(piece)
            while i >= 0:
                yield secret, i + len(piece)
                i = secret.find(piece, i + 1)

    def _in_secret(self, piece: str) -> bool:
        return "\0" not in piece and piece in self._joined

    def find(self, text: str) -> list[Span]:
        if not self.secrets and not self.pins:
            return []
        f = fold(text)
        t = f.text
        out: list[Span] = []
        if self._pin_re is not None:
            out += [Span(*f.span(*m.span()), SECRET) for m in self._pin_re.finditer(t)]
        end = 0
        n = self.min_piece
        for a in range(len(t) - n + 1):
            if a < end or t[a : a + n] not in self._grams:
                continue
            b = a + n
            while b < len(t) and self._in_secret(t[a : b + 1]):
                b += 1
            while a > 0 and self._in_secret(t[a - 1 : b]):
                a -= 1
            piece = t[a:b]
            whole = next((s for s in self.secrets if piece in s), piece)
            if " " in whole and piece != whole:  # a passphrase's piece: whole words only
                if a > 0 and t[a - 1].isalnum() and " " in piece:  # a partial first word
                    a += piece.index(" ") + 1
                if b < len(t) and t[b].isalnum() and " " in t[a:b]:  # a partial last word
                    b = a + t[a:b].rindex(" ")
                piece = t[a:b].strip()
            if b > a and _is_piece(piece, whole) and self._past_generic(piece, self._ends_of(piece)):
                out.append(Span(*f.span(a, b), SECRET))
                end = b
        for a in range(len(t) - _HEAD + 1):
            for e in self._encoded_by_head.get(t[a : a + _HEAD], ()):
                if t.startswith(e, a):
                    out.append(Span(*f.span(*widen_encoded(t, a, a + len(e))), SECRET))
                    break
            if t[a : a + _PIECE] in self._pieces:
                out.append(Span(*f.span(*widen_encoded(t, a, a + _PIECE)), SECRET))
        out += [Span(*f.span(a, b), SECRET) for a, b in self._split_parts(t)]
        return merge_spans(out)

    def _starts(self, part: str) -> Iterable[tuple[str, int]]:
        """Each (secret, offset) where a secret goes on after `part` as its first part: its start,
        or anywhere in it for a part with a digit or a symbol ("ran" of "granite-..." is a word)."""
        anywhere = bool(re.search(r"[^a-z]", part))
        for k in self._by_gram.get(part[: self.min_part], ()):
            secret = self.secrets[k]
            i = secret.find(part) if anywhere else (0 if secret.startswith(part) else -1)
            while i >= 0:
                if i + len(part) < len(secret):
                    yield secret, i + len(part)
                i = secret.find(part, i + 1) if anywhere else -1

    def _open_split(self, t: str, words: Words, i: int, a: int, b: int, fine: bool) -> bool:
        """`t[a:b]` (a form of `words[i]`) may be the first part of a secret whose rest is not
        all written yet, and is recent enough for the rest to follow."""
        if b - a < self.min_part or len(t) - b > self.split_gap:
            return False
        for secret, pos in self._starts(t[a:b]):
            if pos <= self._generic.get(secret, 0):  # "https", "github" of a generic prefix: no secret yet
                continue
            parts = self._continue(t, words, i + 1, b, secret, pos, fine)
            if pos + sum(d - c for c, d in parts) < len(secret):
                return True
        return False

    def _split_parts(self, t: str) -> list[tuple[int, int]]:
        """The parts of secrets written in several words with text between (see the module docstring)."""
        out: list[tuple[int, int]] = []
        for words, fine in _segmentations(t):
            for i, forms in enumerate(words):
                for a, b in forms:
                    if b - a < self.min_part:
                        continue
                    for secret, pos in self._starts(t[a:b]):
                        parts = self._continue(t, words, i + 1, b, secret, pos, fine)
                        whole = t[a:b] + "".join(t[c:d] for c, d in parts)
                        reach = pos + sum(d - c for c, d in parts)
                        if (
                            parts
                            and len(whole) >= self.min_piece
                            and _is_piece(whole, secret.replace(" ", ""))
                            and reach - self._generic.get(secret, 0) >= 3
                        ):
                            out += [(a, b), *parts]
        return out

    def _continue(
        self, t: str, words: Words, i: int, end: int, secret: str, pos: int, fine: bool
    ) -> list[tuple[int, int]]:
        """The words from `words[i]` on (within `split_gap` characters of each other) that go on
        with `secret` from `pos`, in order, until it is complete.

        Between `fine` words (letters and digits only), a character of the secret's own that is
        neither must stand in the text too, just after the part before or just before the word:
        "Granite-" or "-Plum" go on with "granite-plum", "Granite; plum" does not."""
        parts: list[tuple[int, int]] = []
        while i < len(words) and pos < len(secret) and words[i][0][0] - end <= self.split_gap:
            rest = secret[pos:]
            symbols = _LEADING_SYMBOLS.match(rest)  # always matches, maybe empty
            sep = symbols.group() if fine and symbols else ""
            after_part = t[end : end + len(sep)] == sep
            hit = None
            for a, b in words[i]:  # the longest form the secret goes on with (two characters or more)
                before_word = a >= len(sep) and t[a - len(sep) : a] == sep
                # One character is a part too where the secret goes on with it ("lantern p; ...
                # rism cobalt"): the parts together must still make a piece (`_split_parts`).
                if (after_part or before_word) and rest[len(sep) :].startswith(t[a:b]):
                    hit = (a, b)
                    break
            if hit is not None:
                parts.append(hit)
                pos += len(sep) + hit[1] - hit[0]
                end = hit[1]
            i += 1
        return parts

    def hazard(self, text: str) -> Span | None:
        if not self.secrets and not self.pins:
            return None
        tail_raw = text[-96:]
        f = fold(tail_raw)
        t = f.text
        offset = len(text) - len(tail_raw)
        best: int | None = None
        # A PIN's first digits (or its reversed form's), with separators, may still become it.
        run = re.search(r"(?<![a-z0-9])\d(?:[\s.\-_/,:|]{0,2}\d){0,7}[\s.\-_/,:|]{0,2}\Z", t)
        if run and self.pins:
            digits = re.sub(r"\D", "", run.group())
            if any(p.startswith(digits) or p[::-1].startswith(digits) for p in self.pins):
                best = run.start()
        # The longest suffix that is still a piece of a secret (two characters or more).
        # A suffix of a piece is a piece too, so the longest one is found by bisection (a few
        # substring searches instead of one per position).
        lo, hi = max(0, len(t) - 80), len(t) - 1
        if lo < hi and self._in_secret(t[hi - 1 :]):
            hi -= 1  # t[hi:] is a piece (two characters or more); find the smallest such start
            while lo < hi:
                mid = (lo + hi) // 2
                if self._in_secret(t[mid:]):
                    hi = mid
                else:
                    lo = mid + 1
            best = hi
        # A recent word that is a piece of a secret: the rest may follow after a few words.
        for words, fine in _segmentations(t):
            for i, forms in enumerate(words):
                part = next(((a, b) for a, b in forms if self._open_split(t, words, i, a, b, fine)), None)
                if part is not None:
                    best = part[0] if best is None else min(best, part[0])
                    break
        # Any trailing run without spaces: a secret reversed or in ROT13 keeps its symbols
        # ("dh4aghz!9rjy"), so a run of encoding characters alone let it go at the "!".
        m = re.search(r"\S+\Z", t)
        if m and self._encoded_prefixes:
            word = m.group()
            for i in range(len(word)):
                if word[i:] in self._encoded_prefixes or (i == 0 and word in self._encoded_heads):
                    start = m.start() + i
                    best = start if best is None else min(best, start)
                    break
        # A passphrase reversed or in ROT13 has spaces: the words since one of the last few word
        # starts may together begin its encoding ("reicalg nor" of "reicalg norffas elbbep").
        if self._encoded_spaced:
            for w in list(re.finditer(r"(?<![^\s\"'`(\[{<])[^\s\"'`(\[{<]", t))[-8:]:
                if w.start() < (best if best is not None else len(t)) and t[w.start() :] in self._encoded_spaced:
                    best = w.start()
                    break
        return None if best is None else Span(offset + f.raw_start(best), len(text), SECRET)
