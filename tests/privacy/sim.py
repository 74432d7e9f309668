"""A reference guarded round loop: how the device should act on `GuardVerdict`s.

The Specialist is scripted to copy a target text token by token (the deliberately leaky
"verbatim-copy" control: it reproduces private history, identities and canaries), and the cloud
accepts every draft, so the only thing deciding what goes up is the guard. Every round is encoded
with the real wire format (`core.wire.encode_round`), so frame sizes are real.

The loop keeps the two views the placeholder protocol needs: `real` (the device's text, what the
user gets) and `cloud` (what the cloud committed), equal except where a span was replaced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core import wire
from privacy.detectors import EgressGuard, Policy, Tokenizer


@dataclass
class Run:
    real: list[int] = field(default_factory=list)
    cloud: list[int] = field(default_factory=list)
    sent: list[list[int]] = field(default_factory=list)  # device-authored tokens each round put on the wire
    frames: list[bytes] = field(default_factory=list)
    decisions: list[tuple[str, int, str]] = field(default_factory=list)  # (decision, count, placeholder)
    local_tail: list[int] = field(default_factory=list)  # keep-local: finished without the cloud

    def uplink_text(self, tok: Tokenizer) -> str:
        """The cloud accepted every round, so what it saw reads as one stream, in order."""
        return tok.decode([t for s in self.sent for t in s])


def run(
    target: list[int],
    tok: Tokenizer,
    guard: EgressGuard | None,
    *,
    k: int = 4,
    lookahead: int = 32,
) -> Run:
    out = Run()
    seq = 0
    while len(out.real) < len(target):
        pos = len(out.real)
        new = target[pos : pos + k]
        send = len(new)
        if guard is None:
            verdict = None
        else:
            # The scripted text ends with the target, as a model's does at end-of-sequence.
            verdict = guard.check(out.real, new, tok, send=send, final=pos + len(new) == len(target))
            # Look ahead locally while the verdict may still change (no round trip).
            while verdict.hold and len(new) - send < lookahead and pos + len(new) < len(target):
                new = target[pos : pos + len(new) + k]  # a drafting step's worth at a time
                verdict = guard.check(out.real, new, tok, send=send, final=pos + len(new) == len(target))
            # A hold that cannot be resolved is treated as final: fail closed.
        literal: list[int] = []
        if verdict is None or verdict.cut_at is None:
            draft, real_extra = new[:send], []
        elif verdict.cut_at > 0:
            draft, real_extra = new[: verdict.cut_at], []
            out.decisions.append(("cut", 1, verdict.placeholder or "<PRIVATE>"))
        else:
            assert guard is not None and verdict.kind is not None and verdict.span_end is not None
            if guard.policy is Policy.KEEP_LOCAL:
                out.decisions.append(("keep-local", 1, verdict.placeholder or "<PRIVATE>"))
                out.local_tail = target[pos:]
                out.real += out.local_tail
                break
            draft, real_extra = [], new[: verdict.span_end]
            literal = guard.placeholder_ids(verdict.kind, tok)
            out.decisions.append(("placeholder", 1, verdict.placeholder or "<PRIVATE>"))
        seq += 1
        # Until the wire has a literal field, the placeholder rides where the draft goes.
        on_wire = draft + literal
        out.frames.append(wire.encode_round(seq, [], on_wire))
        out.sent.append(on_wire)
        out.real += draft + real_extra
        out.cloud += draft + literal
    return out
