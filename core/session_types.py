"""The values that cross between device and cloud, as plain Python.

These are the narrow interface between the two halves: the device sends `SessionParams` and
prompt token IDs once, then `Round`s of token IDs; the cloud answers each round with a `Verdict`.
`core/wire.py` maps them to and from the `.proto` messages; nothing else crosses.
"""

from __future__ import annotations

import math
import numbers
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import TypeVar

from specsteer.core.errors import ConfigError
from specsteer.core.limits import WIRE_MAX_TOP_K as WIRE_MAX_TOP_K  # the sizes of a session live in core.limits

# Bounds every party enforces; the wire encodes gamma and alpha in fixed point at these resolutions,
# so an uplink cannot smuggle arbitrary floats.
GAMMA_SCALE = 1_000_000  # gamma in parts per million
GAMMA_MAX = 1000.0  # finite gammas above this are pointless (every draft rejected)
ALPHA_SCALE = 1000  # alpha in thousandths
ALPHA_MAX = 10.0
MAX_DRAFT_LEN = 32  # K
MAX_CANDIDATE_TOKENS = 8  # Specialist tokens per cross-vocabulary candidate string
MAX_LITERAL_TOKENS = 16  # Specialist tokens of one guard placeholder (Round.literal_ids)
MAX_ADAPTER_VERSION = 2**31 - 1

_E = TypeVar("_E", bound=StrEnum)


class GuardDecision(StrEnum):
    """The egress guard's decisions, as the device records them and `audit verify` reads them."""

    CUT = "cut"  # a shorter draft
    PLACEHOLDER = "placeholder"  # a placeholder on the wire in place of a span
    KEEP_LOCAL = "keep-local"  # the rest of the text kept on the device
    # The prompt's spans (`sdk.prompt_guard`), recorded right after the Open, before any round:
    PROMPT_REDACT = "prompt-redact"  # the Open carried placeholders in place of them
    PROMPT_ALLOW = "prompt-allow"  # the Open carried them as typed: the user's policy said so


class Method(StrEnum):
    """Decoding methods; all but the first two need the cloud."""

    SLM = "slm"  # Specialist alone, no private context
    SLM_RAG = "slm-rag"  # Specialist with retrieved private context
    LLM = "llm"  # Generalist alone
    SD = "sd"  # standard speculative decoding toward P_G
    FUSION = "fusion"  # token-level fusion every step (LightCoSteer)
    SPECSTEER = "specsteer"

    @property
    def uses_cloud(self) -> bool:
        return self not in (Method.SLM, Method.SLM_RAG)

    @property
    def uses_private_context(self) -> bool:
        return self not in (Method.SLM, Method.LLM)


class CandidatePolicy(StrEnum):
    """How the cloud picks the k steering candidates (algorithm.md, "Candidate selection")."""

    GUARDRAIL = "guardrail"  # the k most likely tokens under P_G, each carrying v(y)
    LITERAL = "literal"  # the paper's: the k largest v(y) = log P_G - alpha * log P_S^0


@dataclass(frozen=True)
class SessionParams:
    """What the device declares to the cloud for one generation. Bounded, no free-form fields.

    `gamma` may be 0 (accept every draft) or `math.inf` (reject every draft). `top_k` may be as
    large as the vocabulary in-process; a network verifier caps it (`WIRE_MAX_TOP_K` by default).

    `certainty` and `gamma_uncertain` are the certainty gate (docs/algorithm.md, "The certainty
    gate"), an extension of the paper's ratio test: a draft unit where the Generalist's most likely
    token has probability below `certainty` is tested against `gamma_uncertain` instead of `gamma`.
    `certainty` 0 (the default) is the paper's rule: one gamma everywhere.

    `gamma_form` is the form rule (docs/algorithm.md, "The form rule"), another extension: a draft
    unit of layout and punctuation only (no letter or digit) is tested against `gamma_form`
    instead. None (the default) is the paper's rule.
    """

    method: Method = Method.SPECSTEER
    sampling: bool = False
    gamma: float = 0.5
    alpha: float = 1.0
    top_k: int = 10
    draft_len: int = 4
    policy: CandidatePolicy = CandidatePolicy.GUARDRAIL
    bonus: bool = True
    adapter_version: int = 0
    padded_frames: bool = False  # constant-size rounds on the wire (core/wire.py, PaddedRound)
    certainty: float = 0.0  # the certainty gate's threshold on P_G's top probability (0: off)
    gamma_uncertain: float = 0.1  # the ratio test's gamma where P_G is below `certainty`
    gamma_form: float | None = None  # the form rule's gamma for drafts of layout and punctuation (None: off)

    def __post_init__(self) -> None:
        # An app may name the method and policy as the CLI does ("slm"); the fields hold the enums.
        object.__setattr__(self, "method", _member(Method, "method", self.method))
        object.__setattr__(self, "policy", _member(CandidatePolicy, "policy", self.policy))
        check_setting_types(type(self), vars(self))
        if math.isnan(self.gamma) or self.gamma < 0 or (math.isfinite(self.gamma) and self.gamma > GAMMA_MAX):
            raise ConfigError(f"gamma must be 0, +inf, or in (0, {GAMMA_MAX:g}]; got {self.gamma}")
        if math.isfinite(self.gamma) and self.gamma != round(self.gamma * GAMMA_SCALE) / GAMMA_SCALE:
            raise ConfigError(f"gamma has a resolution of 1e-6; got {self.gamma}")
        if not (0.0 <= self.certainty <= 1.0) or self.certainty != round(self.certainty * GAMMA_SCALE) / GAMMA_SCALE:
            raise ConfigError(f"certainty must be in [0, 1] with a resolution of 1e-6; got {self.certainty}")
        if not (0.0 <= self.gamma_uncertain <= GAMMA_MAX) or (
            self.gamma_uncertain != round(self.gamma_uncertain * GAMMA_SCALE) / GAMMA_SCALE
        ):
            raise ConfigError(
                f"gamma_uncertain must be in [0, {GAMMA_MAX:g}] with a resolution of 1e-6; got {self.gamma_uncertain}"
            )
        if self.certainty and self.method is not Method.SPECSTEER:
            raise ConfigError(f"the certainty gate is part of specsteer's ratio test; {self.method.value} has none")
        if self.gamma_form is not None:
            _check_gamma_form(self.gamma_form, self.method)
        if not (0.0 <= self.alpha <= ALPHA_MAX) or self.alpha != round(self.alpha * ALPHA_SCALE) / ALPHA_SCALE:
            raise ConfigError(f"alpha must be in [0, {ALPHA_MAX:g}] with a resolution of 0.001; got {self.alpha}")
        if self.top_k < 1:
            raise ConfigError(f"top-k must be at least 1; got {self.top_k}")
        if not (0 <= self.draft_len <= MAX_DRAFT_LEN):
            raise ConfigError(f"draft length K must be in [0, {MAX_DRAFT_LEN}]; got {self.draft_len}")
        if self.draft_len == 0 and self.method in (Method.SPECSTEER, Method.SD):
            raise ConfigError(f"{self.method.value} needs a draft length K of at least 1")
        if self.draft_len != 0 and self.method in (Method.FUSION, Method.LLM):
            raise ConfigError(f"{self.method.value} decides every token in the cloud: draft length K must be 0")
        if self.method is Method.LLM and self.alpha != 0:
            raise ConfigError("llm takes the Generalist alone: alpha must be 0")
        if self.method is Method.SD and self.sampling:
            raise ConfigError("sd runs in greedy mode only: its sampling rule would need the draft probabilities")
        if not (0 <= self.adapter_version <= MAX_ADAPTER_VERSION):
            raise ConfigError(f"adapter version must be in [0, {MAX_ADAPTER_VERSION}]")


def _check_gamma_form(form: float, method: Method) -> None:
    problem = setting_type_problem("gamma_form", form, float)
    if problem is not None:
        raise ConfigError(f"{problem} (or None: the form rule off)")
    if not (0.0 <= form <= GAMMA_MAX) or form != round(form * GAMMA_SCALE) / GAMMA_SCALE:
        raise ConfigError(f"gamma_form must be in [0, {GAMMA_MAX:g}] with a resolution of 1e-6; got {form}")
    if method is not Method.SPECSTEER:
        raise ConfigError(f"the form rule is part of specsteer's ratio test; {method.value} has none")


def _member(enum: type[_E], name: str, value: object) -> _E:
    """`value` as a member of `enum`: the member itself or its value ("slm" for `Method.SLM`)."""
    if isinstance(value, enum):
        return value
    choices = ", ".join(m.value for m in enum)
    if isinstance(value, str):
        try:
            return enum(value)
        except ValueError:
            raise ConfigError(f"unknown {name} {value!r}: choose one of {choices}") from None
    raise ConfigError(f"{name} must be a {enum.__name__} or one of {choices}; got {type(value).__name__} {value!r}")


_KINDS = {bool: "True or False", int: "a whole number (int)", float: "a number (int or float)"}


@cache
def _field_kinds(cls: type) -> dict[str, object]:
    return {name: kind for name, kind in typing.get_type_hints(cls).items() if kind in _KINDS}


def setting_type_problem(name: str, value: object, kind: object) -> str | None:
    """Why `value` cannot be setting `name` declared as `kind` (bool, int or float), if it cannot.

    A typed API refuses a string ("0.5") rather than guess; a bool is no number here, though
    Python counts it as one, so `top_k=True` is refused too.
    """
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    else:
        return None
    return None if ok else f"{name} must be {_KINDS[kind]}; got {type(value).__name__} {value!r}"


def check_setting_types(cls: type, values: Mapping[str, object]) -> None:
    """A `ConfigError` naming the first of `values` that is not of the type its bool, int or float
    field of the dataclass `cls` declares (`SessionParams`, `sdk.decoding.DecodeOptions`)."""
    kinds = _field_kinds(cls)
    for name, value in values.items():
        problem = setting_type_problem(name, value, kinds.get(name))
        if problem is not None:
            raise ConfigError(problem)


@dataclass(frozen=True)
class SteeringVector:
    """Top-k steering from the cloud: per candidate, its Specialist token IDs and its value v.

    Same-vocabulary candidates are single tokens; cross-vocabulary candidates are the Specialist
    tokenization of one Generalist token's string (at most `MAX_CANDIDATE_TOKENS` tokens).
    v(c) = log P_G(c) - alpha * log P_S^0(c). For `sd`/`llm` there is one candidate: the token
    the Generalist chose, which the device must take.
    """

    candidates: tuple[tuple[int, ...], ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.candidates) != len(self.values):
            raise ValueError("one value per candidate")
        if not self.candidates:
            raise ValueError("a steering vector needs at least one candidate")


@dataclass(frozen=True)
class FusionVector:
    """Dense steering for `fusion` sessions (token-level fusion, LightCoSteer) over one vocabulary:
    v(y) = log P_G(y) - alpha * log P_S^0(y) for every Specialist token y, in token-ID order, as
    little-endian float32 bytes (exactly what the wire carries: 4 bytes per vocabulary entry). The
    device picks from all of them by v + alpha * log P_S^c, the full-vocabulary log-linear fusion
    z_G + alpha (z_S^c - z_S^0) of algorithm.md's baselines. Any single token may be committed."""

    values: bytes

    def __post_init__(self) -> None:
        if not self.values or len(self.values) % 4:
            raise ValueError("a fusion vector is a non-empty run of float32 values")

    @property
    def size(self) -> int:
        return len(self.values) // 4


class AnyOneToken:
    """The commits a dense fusion vector allows, as a container: any single token (its ID is
    range-checked on its own). Used where a set of candidate spellings is otherwise kept."""

    def __contains__(self, commit: object) -> bool:
        return isinstance(commit, tuple) and len(commit) == 1


ANY_ONE_TOKEN = AnyOneToken()


@dataclass(frozen=True)
class Verdict:
    """The cloud's answer to one round: how many drafted tokens it accepted, and the steering
    vector at the first rejected position (or the bonus position after a full acceptance)."""

    accepted: int
    # None only when the accepted draft ended with end-of-sequence; a FusionVector only in fusion
    # sessions over a shared vocabulary.
    steering: SteeringVector | FusionVector | None


@dataclass
class GenerationStats:
    """Counters of one generation; `sdk generate --json` prints them."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    recoveries: int = 0
    bonus_tokens: int = 0
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    fallback: str | None = None  # why the device finished locally, if it did
    # How often a lost verifier session was resumed in a new one (`sdk.decoding.generate`), and the
    # losses it recovered from, in order, comma-separated (e.g. "verifier-lost").
    resumed: int = 0
    resume_reasons: str | None = None
    # Verifier-side counters, e.g. cross-vocabulary draft positions on a boundary both tokenizers share.
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "recoveries": self.recoveries,
            "bonus_tokens": self.bonus_tokens,
            "uplink_bytes": self.uplink_bytes,
            "downlink_bytes": self.downlink_bytes,
            "new_tokens": self.new_tokens,
            "seconds": round(self.seconds, 3),
            "tokens_per_second": round(self.new_tokens / self.seconds, 3) if self.seconds > 0 else 0.0,
            "fallback": self.fallback,
            "resumed": self.resumed,
            "resume_reasons": self.resume_reasons,
            **self.extra,
        }
