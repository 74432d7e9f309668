"""The egress guard: finds sensitive spans in a draft before it leaves the device.

Pure: no I/O, no network, no logging of the text it sees. `EgressGuard` composes three detectors
(each matches the folded text, `privacy.normalize.fold`, and maps its spans back to the raw
characters) with the deployment's `GuardPolicy`:

* `privacy.pii.PiiDetector` - personal-data patterns (emails, also written out; phone numbers in
  national and international formats; payment cards with a Luhn check; IPv4/IPv6 addresses; URLs
  carrying credentials; IBANs with the country length and mod-97 check; street addresses).
* `privacy.recognizers` - the same kinds by the libraries made for them (libphonenumber, stdnum,
  detect-secrets), plus what needs a keyword or a word list: values a keyword announces
  (`KeywordValueRecognizer`: "password is ...", "pin 4383", national identifiers, passport and
  licence numbers, dates of birth, bank accounts), identifiers with a shape of their own
  (`ShapeRecognizer`: vendor tokens, TOTP seeds, crypto and MAC addresses, coordinates, defanged
  IPv4, phone links, P.O. boxes) and wallet seed phrases (`SeedPhraseRecognizer`, BIP-39).
* `privacy.special.SpecialCategoryRecognizer` - special categories of personal data (GDPR Art. 9:
  health, medications, pregnancy, disabilities, sexual life, religion, political opinion,
  ethnicity, union membership) by a vocabulary shipped in the package and a few patterns.
* `privacy.ngrams.VerbatimNgramDetector` - runs of `n` or more Specialist tokens (default 8) that
  occur in the user's private history and not in the public prompt, and copy a passage (three
  words or more, or `2 n` tokens of anything): not a date, a number or one identifier that
  ordinary text repeats.
* `privacy.canaries.CanaryDetector` - registered strings: planted canaries, and the user's own
  identities (names and emails from commit trailers, which the dataset's profiles carry), with the
  forms they take on the way out (`privacy.registered`: name variants, a canary's bare secret, hex
  and base64).

`EgressGuard.inspect(committed_text, draft_text)` returns the sensitive spans that touch the draft,
including spans that begin in already-committed text and continue into the draft.
`EgressGuard.check(committed_ids, new_ids, tokenizer)` returns a `GuardVerdict` saying where to
cut the tokens about to go up, and what to put in their place.

Why "holds" exist. A span that is only *complete* in the next round would otherwise leak its
prefix now: "john.doe@example.c" goes up in round i (not yet an email: one-letter TLD), the final
"om" is blocked in round i+1, and the cloud already has the address. So every detector also
reports a *hazard*: the earliest offset from which the end of the text could still grow into a
span ("jane.doe" before its "@", "...@exam", "+1 415 55", "4111 1111", a prefix of a registered
name, the first digits of a canary's secret). A hazard cuts the
draft like a span does, and sets `hold` so the device drafts a few tokens further locally (no
round trip) until the hazard turns into a span or dissolves. A device that cannot look further
(end of text, budget, look-ahead cap) treats the hold as a span: fail closed.

The device acts on verdicts in `sdk/uplink_guard.py` (`plan_uplink`): it checks the pending
recovery plus the fresh draft, drafts further locally while a verdict holds, sends the draft only
up to a cut, and at a span at the front applies the deployment's `GuardPolicy`: the cloud commits
`placeholder_ids(kind)` (`Round.literal_ids`) while the device's text keeps the real span, or the
device finishes alone (keep-local). Every decision is logged (kind, count, placeholder), never the span.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from specsteer.core.errors import ConfigError
from specsteer.core.session_types import GuardDecision
from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.context_ids import BirthDateRecognizer, LicencePlateRecognizer
from specsteer.privacy.history_secrets import HistorySecretDetector
from specsteer.privacy.ngrams import RewrittenVerbatimDetector, VerbatimNgramDetector
from specsteer.privacy.pii import PiiDetector
from specsteer.privacy.recognizers import (
    CardRecognizer,
    KeywordValueRecognizer,
    NationalIdRecognizer,
    PhoneRecognizer,
    SecretRecognizer,
    SeedPhraseRecognizer,
    ShapeRecognizer,
    WrappedEmailRecognizer,
)
from specsteer.privacy.registered import common_english_words
from specsteer.privacy.spans import (
    ADDRESS,
    CANARY,
    CARD,
    EMAIL,
    IBAN,
    IP,
    NAME,
    NATIONAL_ID,
    PHONE,
    PRIVATE_NGRAM,
    SECRET,
    SPECIAL_CATEGORY,
    URL_CREDENTIALS,
    Detector,
    Span,
    Tokenizer,
    decode,
    merge_spans,
)
from specsteer.privacy.special import SpecialCategoryRecognizer
from specsteer.privacy.uplinked import UplinkRecord

__all__ = [
    "GENERIC_PLACEHOLDER",
    "PLACEHOLDERS",
    "PLACEHOLDER_LABELS",
    "EgressGuard",
    "GuardPolicy",
    "GuardVerdict",
    "common_prefix_length",
    "kind_of_placeholder",
    "placeholder_labels",
    "token_offsets",
]

# One label per kind, so an audit record's placeholder names the kind without a separate field.
# Every label fits audit.records' placeholder grammar ([A-Za-z0-9_[]<>{}:-]{1,32}).
PLACEHOLDERS: Mapping[str, str] = {
    EMAIL: "<EMAIL>",
    PHONE: "<PHONE>",
    CARD: "<CARD>",
    IP: "<IP>",
    URL_CREDENTIALS: "<URL>",
    IBAN: "<IBAN>",
    PRIVATE_NGRAM: "<PRIVATE>",
    CANARY: "<SECRET>",
    NAME: "<NAME>",
    ADDRESS: "<ADDRESS>",
    SECRET: "<KEY>",
    NATIONAL_ID: "<ID>",
    SPECIAL_CATEGORY: "<SPECIAL>",
}


# Category-free placeholders: every held span goes up as the same label, so the cloud learns that
# something private was written there, not what kind of thing (docs/privacy.md, "Defaults").
GENERIC_PLACEHOLDER = "<PRIVATE>"
PLACEHOLDER_LABELS = ("generic", "by-kind")  # a deployment's choice; "generic" by default


def placeholder_labels(labels: str) -> Mapping[str, str]:
    """The placeholder of every kind for a labels setting (one of `PLACEHOLDER_LABELS`)."""
    if labels == "by-kind":
        return dict(PLACEHOLDERS)
    if labels == "generic":
        return {kind: GENERIC_PLACEHOLDER for kind in PLACEHOLDERS}
    raise ConfigError(f"placeholder labels are one of {', '.join(PLACEHOLDER_LABELS)}; got {labels!r}")


def kind_of_placeholder(label: str) -> str | None:
    """The kind a placeholder label stands for (`"<EMAIL>"` -> `"email"`), or None."""
    for kind, text in PLACEHOLDERS.items():
        if text == label:
            return kind
    return None


class GuardPolicy(StrEnum):
    """What happens to a span at the front of the uplink (a deployment setting)."""

    # Each policy is also the decision the device records (`core.session_types.GuardDecision`).
    PLACEHOLDER = GuardDecision.PLACEHOLDER.value  # the cloud gets placeholder tokens, the user's text the real span
    KEEP_LOCAL = GuardDecision.KEEP_LOCAL.value  # nothing of it goes up: the device finishes the text alone


@dataclass(frozen=True)
class GuardVerdict:
    """What to send of `new_ids` (indices below are into `new_ids`).

    cut_at      first token not to send (it touches a span or a hazard); None: send all `send` tokens
    span_end    with a cut: the first token after the sensitive span (`len(new_ids)` if it runs to the end)
    kind        the kind of the span at `cut_at` (None without a cut)
    placeholder its label, e.g. "<EMAIL>" (the audit record's `placeholder`)
    hold        the cut comes from a hazard, or a span that reaches the end of the text: drafting
                further locally may change the verdict; a device that cannot must treat it as final
    spans       every complete span touching the new tokens, in characters of the decoded window
    action      "pass", "cut" (send a shorter draft), "hold", or the policy ("placeholder", "keep-local")
    """

    cut_at: int | None
    span_end: int | None = None
    kind: str | None = None
    placeholder: str | None = None
    hold: bool = False
    spans: tuple[Span, ...] = ()
    action: str = "pass"


@dataclass(frozen=True)
class EgressGuard:
    """Detectors plus the deployment's policy; one instance per session (`for_prompt`)."""

    detectors: tuple[Detector, ...]
    policy: GuardPolicy = GuardPolicy.PLACEHOLDER
    context_chars: int = 512  # committed text re-scanned for spans that continue into the draft
    context_tokens: int = 96  # committed tokens decoded by `check` for the same purpose
    placeholders: Mapping[str, str] = field(default_factory=lambda: dict(PLACEHOLDERS))
    # The session's record of the secrets' chunks that went up (`privacy.uplinked`): made new by
    # `for_prompt` (and `new_session`), filled by `note_uplink`; None: no record (a guard that is
    # not one session's).
    uplinked: UplinkRecord | None = field(default=None, compare=False, repr=False)
    words: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # the history's lower-case words

    def __post_init__(self) -> None:
        object.__setattr__(self, "detectors", tuple(self.detectors))
        object.__setattr__(self, "policy", GuardPolicy(self.policy))

    @classmethod
    def for_profile(
        cls,
        history: Iterable[str],
        tokenizer: Tokenizer,
        *,
        identities: Mapping[str, str] | None = None,
        canaries: Iterable[str] = (),
        policy: GuardPolicy = GuardPolicy.PLACEHOLDER,
        n: int = 8,
        public_texts: Iterable[str] = (),
        labels: str = "by-kind",
    ) -> EgressGuard:
        """The standard guard: personal-data patterns, verbatim history n-grams, identities and canaries."""
        history, public_texts = list(history), list(public_texts)  # each is read by two detectors
        registered: dict[str, str] = dict(identities or {})
        registered.update({c: CANARY for c in canaries})
        detectors: list[Detector] = [
            PiiDetector(),
            PhoneRecognizer(),
            CardRecognizer(),
            NationalIdRecognizer(),
            SecretRecognizer(),
            WrappedEmailRecognizer(),
            KeywordValueRecognizer(),
            ShapeRecognizer(),
            SeedPhraseRecognizer(),
            SpecialCategoryRecognizer(),
            LicencePlateRecognizer(),
            BirthDateRecognizer(),
            VerbatimNgramDetector.from_texts(history, tokenizer, n=n, public_texts=public_texts),
            RewrittenVerbatimDetector.from_texts(history, tokenizer, n=n, public_texts=public_texts),
        ]
        secrets = HistorySecretDetector.from_history(history)
        if len(secrets):
            detectors.append(secrets)
        # Words the history writes in lower case are words, not names: "Will Smith"'s "Will" alone
        # is not redacted in a history that says "we will" (nor is "will" a chunk of a secret).
        words = frozenset(w for text in history for w in re.findall(r"(?<![A-Za-z])[a-z]{3,}(?![A-Za-z])", text))
        if registered:
            detectors.append(CanaryDetector(registered, common_words=words))
        return cls(tuple(detectors), policy, placeholders=placeholder_labels(labels), words=words)

    def for_prompt(self, prompt: str) -> EgressGuard:
        """The guard for one session: n-grams of the public prompt are not private, and what goes
        up is recorded for this session alone (`new_session`)."""
        return replace(self, detectors=tuple(d.for_prompt(prompt) for d in self.detectors)).new_session()

    def new_session(self) -> EgressGuard:
        """This guard with an empty record of what went up (`privacy.uplinked.UplinkRecord`): the
        registered secrets (the history's, the canaries' cores), whose chunks `note_uplink` records."""
        secrets: list[tuple[str, str]] = []
        for d in self.detectors:
            if isinstance(d, HistorySecretDetector):
                secrets += [(x, SECRET) for x in d.secrets]
            elif isinstance(d, CanaryDetector):
                secrets += [(x, CANARY) for x in sorted(d.cores)]
        record = UplinkRecord(secrets, common_words=self.words | common_english_words())
        return replace(self, uplinked=record)

    def note_uplink(self, committed_ids: Sequence[int], sent_ids: Sequence[int], tokenizer: Tokenizer) -> None:
        """`sent_ids` went up after `committed_ids` (the device's text before them): the session's
        record takes the chunks of secrets in them. Nothing without a record."""
        if self.uplinked is None or not sent_ids:
            return
        ctx = list(committed_ids[-self.context_tokens :]) if self.context_tokens else []
        text = decode(tokenizer, [*ctx, *sent_ids])
        self.uplinked.note(text, common_prefix_length(decode(tokenizer, ctx), text))

    def without_local_part_holds(self) -> EgressGuard:
        """This guard, not holding a bare trailing word as a possible address local part nor as the
        start of a special-category term (for the end of a text: nothing more will be written, so a
        word stays a word)."""
        detectors = [
            PiiDetector(d.kinds, hold_local_parts=False)
            if isinstance(d, PiiDetector)
            else SpecialCategoryRecognizer(hold_prefixes=False)
            if isinstance(d, SpecialCategoryRecognizer)
            else d
            for d in self.detectors
        ]
        return replace(self, detectors=tuple(detectors))

    def placeholder_for(self, kind: str) -> str:
        return self.placeholders.get(kind, GENERIC_PLACEHOLDER)

    def placeholder_ids(self, kind: str, tokenizer: Tokenizer) -> list[int]:
        """The placeholder's Specialist token IDs, what the cloud commits in place of the span."""
        return list(tokenizer.encode(self.placeholder_for(kind), add_special_tokens=False))

    # -- text level ---------------------------------------------------------------------------

    def inspect(self, committed_text: str, draft_text: str) -> list[Span]:
        """Complete sensitive spans touching `draft_text`, in characters of `committed_text + draft_text`.

        Overlapping spans are merged (named after the most specific kind). A span that starts in
        the committed text and continues into the draft is included.
        """
        start = max(0, len(committed_text) - self.context_chars)
        window = committed_text[start:] + draft_text
        boundary = len(committed_text) - start
        raw = [s for d in self.detectors for s in d.find(window) if s.end > boundary]
        if self.uplinked is not None:
            raw += [s for s in self.uplinked.find(window, boundary) if s.end > boundary]
        return [Span(s.start + start, s.end + start, s.kind) for s in merge_spans(raw)]

    def prompt_spans(self, prompt: str) -> list[Span]:
        """The sensitive spans of a whole prompt (`sdk.prompt_guard`), but verbatim runs of the
        user's history: a prompt naming the user's own code is the request itself."""
        detectors = tuple(
            d for d in self.detectors if not isinstance(d, VerbatimNgramDetector | RewrittenVerbatimDetector)
        )
        # The whole prompt at once: where it begins and ends is known (no context, no hazard).
        view = replace(self, detectors=detectors, context_chars=len(prompt), uplinked=None)
        return view.inspect("", prompt)

    def hazard(self, committed_text: str, draft_text: str) -> Span | None:
        """The earliest place from which the end of the text could still grow into a span, if any."""
        start = max(0, len(committed_text) - self.context_chars)
        window = committed_text[start:] + draft_text
        # A token that ends inside a multi-byte character decodes to U+FFFD: the character is not
        # known yet ("ѕ" of a homoglyph address), so what precedes it is judged as if the text
        # went on, and the partial character itself is held.
        whole = window.rstrip("\ufffd")
        found = [Span(h.start, len(window), h.kind) for d in self.detectors if (h := d.hazard(whole)) is not None]
        if self.uplinked is not None and (h := self.uplinked.hazard(whole)) is not None:
            found.append(Span(h.start, len(window), h.kind))
        if len(whole) < len(window):
            found.append(Span(len(whole), len(window), PRIVATE_NGRAM))
        h = min(found, default=None)
        return None if h is None else Span(h.start + start, h.end + start, h.kind)

    # -- token level --------------------------------------------------------------------------

    def check(
        self,
        committed_ids: Sequence[int],
        new_ids: Sequence[int],
        tokenizer: Tokenizer,
        *,
        send: int | None = None,
        final: bool = False,
    ) -> GuardVerdict:
        """Decide what of `new_ids[:send]` may go up; `new_ids[send:]` is local look-ahead only.

        `committed_ids` is the device's real committed text (Specialist IDs); only its last
        `context_tokens` are decoded. `new_ids` is normally the pending recovery plus the draft.
        `final` says the text ends with `new_ids` (end of sequence): nothing can grow any more, so
        hazards are dropped and complete spans do not hold. A text cut by the token budget is not
        final - the device can still look ahead locally to decide.
        """
        new = list(new_ids)
        send = len(new) if send is None else send
        if not 0 <= send <= len(new):
            raise ValueError(f"send must be in [0, {len(new)}]; got {send}")
        ctx = list(committed_ids[-self.context_tokens :]) if self.context_tokens else []
        text, offs, split = _token_bounds(tokenizer, ctx, new)
        boundary = offs[0]
        spans = self.inspect(text[:boundary], text[boundary:])
        # The wire carries IDs: match private n-grams on the IDs as drafted, too (a draft need not
        # be the canonical tokenization the text-level match re-derives).
        for d in self.detectors:
            if isinstance(d, VerbatimNgramDetector):
                for a, b in d.find_ids(ctx + new):
                    if b > len(ctx):
                        first = offs[max(a - len(ctx), 0)] if a >= len(ctx) else max(0, boundary - 1)
                        spans.append(Span(first, offs[b - len(ctx)], PRIVATE_NGRAM))
        spans = merge_spans(spans)
        if self.uplinked is not None:
            # A secret held once is the session's for the rest of it: found whole or in chunks
            # without the keyword that announced it.
            for s in spans:
                if s.kind == SECRET and s.end > boundary:
                    self.uplinked.hold(text[s.start : s.end])
        hazard = None if final else self.hazard(text[:boundary], text[boundary:])

        cut: int | None = None
        chosen: Span | None = None
        for s in spans:
            i = _first_touching(offs, s, split)
            if i is not None and (cut is None or i < cut):
                cut, chosen = i, s
        hold = False
        if hazard is not None:
            i = _first_touching(offs, hazard, split)
            # A hazard from the same token as a complete span means the span may still grow
            # ("Jane" of "Jane Do"): hold rather than replace a part of it. (An address already
            # complete before a trailing " d" stays that address; its end may still grow anyway.)
            tie = i == cut and chosen is not None and not (chosen.kind == hazard.kind == EMAIL)
            if i is not None and (cut is None or i < cut or tie):
                cut, chosen, hold = i, hazard, True
        if cut is None or chosen is None or cut >= send:
            return GuardVerdict(None, spans=tuple(spans))
        # A complete span that runs to the end of what was inspected may still grow ("...@example.co" + "m").
        hold = hold or (chosen.end >= len(text) and not final)
        end = next((j for j in range(cut + 1, len(new) + 1) if offs[j] >= chosen.end), len(new))
        if hold:
            action = "hold"
        elif cut > 0:
            action = GuardDecision.CUT.value
        else:
            action = self.policy.value
        return GuardVerdict(
            cut_at=cut,
            span_end=end,
            kind=chosen.kind,
            placeholder=self.placeholder_for(chosen.kind),
            hold=hold,
            spans=tuple(spans),
            action=action,
        )


def token_offsets(tokenizer: Tokenizer, context: Sequence[int], new: Sequence[int]) -> tuple[str, list[int]]:
    """Decoded `context + new`, and the character offset where each new token starts (plus the end).

    Offsets come from decoding growing prefixes. Where a prefix does not decode to a prefix of the
    whole (a token splits a multi-byte character), the offset falls back to the common prefix: the
    split character counts as the later token's (`_token_bounds` also says which ones split).
    """
    full, offs, _ = _token_bounds(tokenizer, context, new)
    return full, offs


def _token_bounds(
    tokenizer: Tokenizer, context: Sequence[int], new: Sequence[int]
) -> tuple[str, list[int], list[bool]]:
    """`token_offsets`, plus for each offset whether it falls inside a character (the token before
    it carries some of that character's bytes, the token after it the rest)."""
    ids = list(context) + list(new)
    full = decode(tokenizer, ids)
    offs: list[int] = []
    split: list[bool] = []
    for i in range(len(new) + 1):
        prefix = decode(tokenizer, ids[: len(context) + i]) if i < len(new) else full
        offs.append(common_prefix_length(prefix, full))
        split.append(not full.startswith(prefix))
    for i in range(len(offs) - 2, -1, -1):
        offs[i] = min(offs[i], offs[i + 1])
    return full, offs, split


def common_prefix_length(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    if b.startswith(a):
        return len(a)
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _first_touching(offs: list[int], span: Span, split: Sequence[bool]) -> int | None:
    """The first new token whose characters overlap `span` (a span before all new tokens touches none).

    A token that ends inside a character (`split[i + 1]`) carries bytes of it: it touches that
    character too, so the first bytes of a span's first character never go up ahead of the cut.
    """
    for i in range(len(offs) - 1):
        a, b = offs[i], offs[i + 1]
        if split[i + 1]:
            b += 1
        if (a < span.end and b > span.start) or (a == b and span.start <= a < span.end):
            return i
    return None
