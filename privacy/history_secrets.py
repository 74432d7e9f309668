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

all on the folded text (case does not hide a secret). Its hazard holds a trailing run that is
still a piece of a secret (from two characters), or the start of one of its encodings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from privacy.normalize import fold
from privacy.recognizers import secret_values
from privacy.registered import encodings, widen_encoded
from privacy.spans import SECRET, Detector, Span, merge_spans

__all__ = ["HistorySecretDetector", "history_secrets"]

_INTRODUCED_HEX = re.compile(
    r"(?i)(?:token|secret|key|password|passwd|pwd|credential|bearer|auth\w*)\W{1,3}(?:\w+\W{1,3}){0,2}?"
    r"(?P<value>[0-9a-f]{20,})(?![0-9a-z])"
)


def history_secrets(history: Iterable[str]) -> set[str]:
    """The secrets a history shows (see the module docstring), as written."""
    out: set[str] = set()
    for text in history:
        for a, b in secret_values(text):
            value = text[a:b].strip()
            if _secret_like(value):
                out.add(value)
        out.update(m.group("value") for m in _INTRODUCED_HEX.finditer(text))
    return out


def _secret_like(value: str) -> bool:
    """A value worth registering: not a setting ("HASH=sha256"), an option ("--quiet"), a word
    ("password") or a constant's name, but 8+ characters of at least two kinds, five of them distinct."""
    if len(value) < 8 or value.startswith("-") or re.match(r"[A-Za-z_][\w.-]*=", value) or len(set(value)) < 5:
        return False
    if re.fullmatch(r"[A-Z0-9_]+|[a-z0-9_]+|[a-z]+(?:[A-Z][a-z]+)+", value):
        return False
    kinds = [r"[a-z]", r"[A-Z]", r"\d", r"[^A-Za-z0-9]"]
    return sum(bool(re.search(k, value)) for k in kinds) >= 2


def _is_piece(piece: str, whole: str) -> bool:
    """A piece of a secret worth a span: the whole secret, 10+ characters, or one with a digit or symbol."""
    return piece == whole or len(piece) >= 10 or bool(re.search(r"[^a-z]", piece))


class HistorySecretDetector(Detector):
    """Registered secrets of the history, whole, in pieces and encoded (see the module docstring)."""

    def __init__(self, secrets: Iterable[str], *, min_piece: int = 6) -> None:
        folded = sorted({fold(s).text for s in secrets if len(s) >= min_piece}, key=len, reverse=True)
        self.secrets = tuple(folded)
        self.min_piece = min_piece
        self._joined = "\0".join(folded)
        grams = {s[i : i + min_piece] for s in folded for i in range(len(s) - min_piece + 1)}
        self._gram_re = (
            re.compile("(?=(" + "|".join(map(re.escape, sorted(grams, key=len, reverse=True))) + "))")
            if grams
            else None
        )
        self.encoded = encodings({s: SECRET for s in secrets})
        self._encoded_re = (
            re.compile("|".join(map(re.escape, sorted(self.encoded, key=len, reverse=True)))) if self.encoded else None
        )
        self._encoded_prefixes = {e[:n] for e in self.encoded for n in range(min(4, len(e)), len(e))}
        # A long encoding the look-ahead cannot hold whole reaches the guard in pieces: any 16
        # characters of one are a span too.
        pieces = {e[i : i + 16] for e in self.encoded for i in range(0, len(e) - 15, 2)}
        self._piece_re = re.compile("|".join(map(re.escape, sorted(pieces)))) if pieces else None

    @classmethod
    def from_history(cls, history: Iterable[str]) -> HistorySecretDetector:
        return cls(history_secrets(history))

    def __len__(self) -> int:
        return len(self.secrets)

    def _in_secret(self, piece: str) -> bool:
        return "\0" not in piece and piece in self._joined

    def find(self, text: str) -> list[Span]:
        if not self.secrets:
            return []
        f = fold(text)
        t = f.text
        out: list[Span] = []
        if self._gram_re is not None:
            end = 0
            for m in self._gram_re.finditer(t):
                a = m.start()
                if a < end:
                    continue
                b = a + self.min_piece
                while b < len(t) and self._in_secret(t[a : b + 1]):
                    b += 1
                while a > 0 and self._in_secret(t[a - 1 : b]):
                    a -= 1
                piece = t[a:b]
                whole = next((s for s in self.secrets if piece in s), piece)
                if _is_piece(piece, whole):
                    out.append(Span(*f.span(a, b), SECRET))
                    end = b
        for pattern in (self._encoded_re, self._piece_re):
            if pattern is None:
                continue
            for m in pattern.finditer(t):
                out.append(Span(*f.span(*widen_encoded(t, m.start(), m.end())), SECRET))
        return merge_spans(out)

    def hazard(self, text: str) -> Span | None:
        if not self.secrets:
            return None
        tail_raw = text[-96:]
        f = fold(tail_raw)
        t = f.text
        offset = len(text) - len(tail_raw)
        best: int | None = None
        # The longest suffix that is still a piece of a secret (two characters or more).
        for i in range(max(0, len(t) - 80), len(t) - 1):
            if self._in_secret(t[i:]):
                best = i
                break
        m = re.search(r"[a-z0-9+/=_-]+\Z", t)
        if m and self._encoded_prefixes:
            word = m.group()
            for i in range(len(word)):
                if word[i:] in self._encoded_prefixes:
                    start = m.start() + i
                    best = start if best is None else min(best, start)
                    break
        return None if best is None else Span(offset + f.raw_start(best), len(text), SECRET)
