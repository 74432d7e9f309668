/** The protocol's bounds, as core/limits.py and core/session_types.py state them. */
export const GAMMA_SCALE = 1_000_000;
export const GAMMA_MAX = 1000;
export const ALPHA_SCALE = 1000;
export const ALPHA_MAX = 10;
export const MAX_DRAFT_LEN = 32;
export const MAX_CANDIDATE_TOKENS = 8;
export const MAX_LITERAL_TOKENS = 16;
export const MAX_ADAPTER_VERSION = 2 ** 31 - 1;
export const MAX_PROMPT_TOKENS = 4096;
export const MAX_NEW_TOKENS = 4096;
/** A resumed Open's `resume_ids` at most (core/limits.py's `MAX_RESUME_TOKENS`). */
export const MAX_RESUME_TOKENS = 2 * MAX_NEW_TOKENS + 8;
export const WIRE_MAX_TOP_K = 64;
export const MAX_VOCAB_SIZE = 1 << 20;
export const MAX_GUARD_SPANS = MAX_PROMPT_TOKENS + MAX_NEW_TOKENS;
export const PAD_ID = 0xffffffff;
export const HASH_BYTES = 32;
export const ED25519_KEY_BYTES = 32;
export const ED25519_SIG_BYTES = 64;
export const COSIGNATURE_BYTES = 4 + 8 + ED25519_SIG_BYTES;
export const MAX_PROOF_HASHES = 64;
export const MAX_NAME_CHARS = 128;
export const MAX_TREE_SIZE = 2n ** 63n - 1n;
