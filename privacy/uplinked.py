"""What of each secret has already gone up in one session (`UplinkRecord`), so a secret sent a
few characters at a time, far apart, is held once its pieces add up.

The detectors look at one window of text (the draft and the last few hundred characters before
it). A registered secret sent in chunks of three to five characters, each in a round of its own
and hundreds of characters apart ("Tr0u" ... "b4do" ... "r&3"), is never a piece
(`privacy.history_secrets`: six characters or more) in any window, and the split-secret rule only
joins parts within 48 characters. So the guard of a session (`EgressGuard.for_prompt`) keeps a
record of the chunks that went up (`note`, called by `sdk.uplink_guard.plan_uplink` for every
draft it sends) and holds a chunk that, with what went up before, would make a piece (`find`).

The secrets are the guard's registered ones: the history's (`HistorySecretDetector.secrets`), the
canaries' secret cores (`CanaryDetector.cores`), and every secret the guard held in this session
(`hold`: a password a keyword announced, "pin 4719"), which is then found whole or in pieces for
the rest of the session, without its keyword.

A chunk is a word (between spaces, or between symbols: `privacy.history_secrets`' two
segmentations) of 3+ characters that occurs in a secret and is not a plain word (it has a digit or
a symbol, or is no word of `common_words`): "Tr0u", "AKIA", "lmxw", not "the". A chunk is held when
it covers characters of the secret that had not gone up, and those that went up with it make a
piece: six characters or the whole secret, with a digit or a symbol, or ten characters
(`privacy.history_secrets._is_piece`). A first chunk of four characters or more that mixes letters
with digits or symbols ("Zr4#", "b4do") is held too: prose has no such word that a secret also
has. A first chunk of letters only or digits only ("AKIA", "482") goes up: three to five such
characters say little alone, and developer text has them; none after it does. Order does not
matter: the end of a secret may go up first.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator

from specsteer.privacy.history_secrets import _is_piece, _segmentations, generic_prefix
from specsteer.privacy.normalize import Folded, fold, fold_string, spelled_tail
from specsteer.privacy.spans import SECRET, Span, merge_spans

__all__ = ["UplinkRecord"]

_SPACE = re.compile(r"\s")


class UplinkRecord:
    """The chunks of each secret that went up in one session (see the module docstring).

    Mutable, one per session: `EgressGuard.for_prompt` makes a new one. `secrets` maps each
    secret (as written or folded) to the kind of span a chunk of it is.
    """

    def __init__(
        self, secrets: Iterable[tuple[str, str]] = (), *, common_words: Iterable[str] = (), min_part: int = 3
    ) -> None:
        self.min_part = min_part
        self.min_piece = 6
        self._common = frozenset(w.lower() for w in common_words)
        self.secrets: list[str] = []
        self.kinds: list[str] = []
        # Per secret: how many of its first characters every secret of its kind has (a webhook's
        # "https://hooks.slack.com/services/", a token's "ghp_"): no chunk of those is the secret's.
        self.generic: list[int] = []
        self._index: dict[str, int] = {}
        self._by_gram: dict[str, list[int]] = {}
        self.covered: dict[int, set[int]] = {}  # per secret: the positions of its characters that went up
        self._whole: set[int] = set()  # secrets held in this session: found whole too
        for secret, kind in secrets:
            self.add(secret, kind)

    def __len__(self) -> int:
        return len(self.secrets)

    def add(self, secret: str, kind: str = SECRET, *, whole: bool = False) -> None:
        """Register `secret` (folded here); `whole`: it is found whole too, however short (a secret
        the guard held in this session)."""
        s = fold_string(secret).strip()
        if len(s) < self.min_part + 1 or _SPACE.search(s):
            return
        k = self._index.get(s)
        if k is None:
            k = self._index[s] = len(self.secrets)
            self.secrets.append(s)
            self.kinds.append(kind)
            self.generic.append(generic_prefix(s))
            for g in {s[i : i + self.min_part] for i in range(len(s) - self.min_part + 1)}:
                self._by_gram.setdefault(g, []).append(k)
        if whole:
            self._whole.add(k)

    def hold(self, text: str, kind: str = SECRET) -> None:
        """A secret the guard held in this session (its value, without the keyword)."""
        self.add(text, kind, whole=True)

    def _plain(self, piece: str) -> bool:
        """A word of letters only that prose writes: not a chunk."""
        return piece.isalpha() and piece in self._common

    def _chunks(self, t: str, start: int) -> Iterator[tuple[int, int, int, frozenset[int]]]:
        """(a, b, secret, positions) for each word of `t` that ends after `start` and occurs in a
        secret (its longest form that does): the secret's characters it stands for."""
        if not self.secrets:
            return
        lo = start
        while lo > 0 and not t[lo - 1].isspace():
            lo -= 1
        sub = t[lo:]
        for words, _fine in _segmentations(sub):
            for forms in words:
                for a, b in forms:
                    if lo + b <= start or b - a < self.min_part:
                        continue
                    piece = sub[a:b]
                    if self._plain(piece):
                        continue
                    found = False
                    for k in self._by_gram.get(piece[: self.min_part], ()):
                        secret = self.secrets[k]
                        at = [i for i in range(len(secret) - len(piece) + 1) if secret.startswith(piece, i)]
                        own = frozenset(j for i in at for j in range(i, i + len(piece)) if j >= self.generic[k])
                        if at:
                            found = True
                        if own:  # a chunk of the generic prefix alone ("https://hooks.slack.com/") is no one's
                            yield lo + a, lo + b, k, own
                    if found:
                        break

    def find(self, text: str, start: int = 0) -> list[Span]:
        """Chunks in `text` ending after `start` that, with what went up, make a piece of a secret
        (or are a secret held in this session, whole)."""
        if not self.secrets:
            return []
        f = fold(text)
        t = f.text
        out: list[Span] = []
        for a, b, k, positions in self._chunks(t, _folded_index(f, start)):
            secret = self.secrets[k]
            if k in self._whole and b - a == len(secret) and len(positions) == len(secret) - self.generic[k]:
                out.append(Span(*f.span(a, b), self.kinds[k]))
                continue
            covered = self.covered.get(k, set())
            if positions <= covered:
                continue  # it repeats what went up
            if not covered:
                if _mixed(t[a:b]):
                    out.append(Span(*f.span(a, b), self.kinds[k]))
                continue  # the first chunk of letters only or digits only goes up
            union = covered | positions
            piece = "".join(secret[i] for i in sorted(union))
            if len(union) >= min(self.min_piece, len(secret)) and _is_piece(piece, secret):
                out.append(Span(*f.span(a, b), self.kinds[k]))
        return merge_spans(out)

    def note(self, text: str, start: int = 0) -> None:
        """`text[start:]` went up: record the chunks of secrets in it (words that end after `start`)."""
        if not self.secrets:
            return
        f = fold(text)
        for _a, _b, k, positions in self._chunks(f.text, _folded_index(f, start)):
            self.covered.setdefault(k, set()).update(positions)

    def hazard(self, text: str) -> Span | None:
        """The end of a word still being written that may become a chunk of a secret part of which
        went up: its longest suffix (two characters or more) that occurs in such a secret; and a
        run of spelling-alphabet words (`privacy.normalize.spelled_tail`) while secrets are registered."""
        if not self.secrets:
            return None
        # A secret spelled in the spelling alphabet ("alpha bravo se..."): held from its first word.
        spelled = spelled_tail(text.lower())  # as written: the fold has made a run of three letters
        if spelled is not None:
            return Span(spelled, len(text), SECRET)
        if not self.covered:
            return None
        tail = text[-64:]
        f = fold(tail)
        m = re.search(r"\S{2,}\Z", f.text)
        if m is None:
            return None
        word = m.group()
        for i in range(len(word) - 1):
            if any(word[i:] in self.secrets[k] for k in self.covered):
                return Span(len(text) - len(tail) + f.raw_start(m.start() + i), len(text), SECRET)
        return None


def _mixed(piece: str) -> bool:
    """Four characters or more, letters with digits or symbols ("Zr4#", "b4do"): no word of prose
    that a secret also has, so held even as the first chunk of a secret to go up."""
    return len(piece) >= 4 and any(c.isalpha() for c in piece) and not piece.isalpha()


def _folded_index(f: Folded, raw: int) -> int:
    """The first folded index whose raw character is at or after `raw`."""
    return bisect.bisect_left(f.starts, raw)
