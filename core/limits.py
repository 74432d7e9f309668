"""The protocol's size limits, one place for the device and the verifier to read them.

The verifier enforces every one of these on what it receives; the device checks the same numbers
before it computes or sends anything, so an out-of-bounds request fails in well under a second with
one sentence instead of after a prefill (a 100,000-character prompt took 30-45 s of forwards on the
device before the verifier refused it) or as a transport error that looks like a busy verifier.

The bounds of each field of the session parameters and rounds (K, gamma, alpha, candidate and
placeholder lengths) live beside the values in `core.session_types`; these are the sizes.
"""

from __future__ import annotations

__all__ = [
    "MAX_DOWNLINK_BYTES",
    "MAX_GUARD_SPANS",
    "MAX_NEW_TOKENS",
    "MAX_PROMPT_TOKENS",
    "MAX_RESUME_TOKENS",
    "MAX_UPLINK_BYTES",
    "MAX_VOCAB_SIZE",
    "WIRE_MAX_TOP_K",
    "max_new_tokens_problem",
    "prompt_length_problem",
    "resume_length_problem",
    "top_k_problem",
]

# The public prompt's token IDs in the Open: the verifier prefills two models on them, so this bounds
# the work (and KV memory) one device can ask for before its first round.
MAX_PROMPT_TOKENS = 4096

# Steering candidates per downlink over a network (algorithm.md, step 4): a verifier may cap k lower,
# never higher. In-process, k may be as large as the vocabulary (full-vocabulary oracles).
WIRE_MAX_TOP_K = 64

# Tokens one generation may add. A session's models hold the prompt and the generation in one KV
# cache: the largest prompt plus this fills 8192 positions, the context of the smallest model the SDK
# embeds (SmolLM2-135M) and of the llama.cpp drafter's default cache. Nothing this project generates
# comes near it (a commit body is ~100 tokens); it is there to refuse absurd values up front.
MAX_NEW_TOKENS = 4096

# The largest vocabulary a session may declare: four times the largest of today's models (Gemma 3's
# 262,144). The declared size is what makes a uint32 on the wire a token ID, so without a bound a
# session declaring 2^32 would let any 32-bit value pass as one (text packed four bytes an ID, or
# the padding ID itself), in the device's egress check and in `audit verify` alike.
MAX_VOCAB_SIZE = 1 << 20

# Spans the egress guard may act on in one recorded decision: a span is at least one token, and a
# session holds at most the largest prompt and the longest generation.
MAX_GUARD_SPANS = MAX_PROMPT_TOKENS + MAX_NEW_TOKENS

# The tokens a resumed session's Open may carry (`Open.resume_ids`): what one session can have put
# in its verifier's KV caches, its text (the generation plus a last candidate's tail of at most 8
# tokens) and the guard's placeholders (at most MAX_NEW_TOKENS, `server.session.CloudSession`).
MAX_RESUME_TOKENS = 2 * MAX_NEW_TOKENS + 8

# Message caps both ways, on the gRPC channel of both ends. The largest uplink is a resumed Open
# with MAX_PROMPT_TOKENS + MAX_RESUME_TOKENS IDs of at most 5 varint bytes each (~60 KiB); the
# largest top-k downlink is WIRE_MAX_TOP_K candidates of 8 IDs and a float (~3.5 KiB). Both caps
# leave room, nothing more; a fusion session's dense downlink is bounded by the vocabulary instead
# (`core.wire.fusion_downlink_bytes`).
MAX_UPLINK_BYTES = 64 * 1024
MAX_DOWNLINK_BYTES = 16 * 1024


def prompt_length_problem(n_tokens: int) -> str | None:
    """Why a public prompt of `n_tokens` token IDs cannot open a session, if it cannot."""
    if n_tokens > MAX_PROMPT_TOKENS:
        return f"the prompt has {n_tokens:,} tokens; the verifier takes at most {MAX_PROMPT_TOKENS}"
    return None


def resume_length_problem(n_tokens: int) -> str | None:
    """Why a resumed Open carrying `n_tokens` committed token IDs cannot open a session, if it cannot."""
    if n_tokens > MAX_RESUME_TOKENS:
        return f"the resumed text has {n_tokens:,} tokens; a session holds at most {MAX_RESUME_TOKENS:,}"
    return None


def top_k_problem(top_k: int, cap: int, *, remote: bool) -> str | None:
    """Why `top_k` is refused under `cap` (a network verifier's k cap, or the vocabulary in-process)."""
    if top_k <= cap:
        return None
    if remote:
        return f"top-k must be at most {cap} with a remote verifier; got {top_k}"
    return f"top-k must be at most the vocabulary of {cap} tokens; got {top_k}"


def max_new_tokens_problem(max_new_tokens: int) -> str | None:
    """Why `max_new_tokens` is out of bounds, if it is."""
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        return f"max-new-tokens must be in [1, {MAX_NEW_TOKENS}]; got {max_new_tokens}"
    return None
