"""core: what the device and the cloud share, and nothing else of ours.

- the wire contract (`core.proto`, `core.wire`), the session parameters (`core.session_types`),
  the one session contract over rounds (`core.contract`) and the protocol's limits both sides
  check before any work (`core.limits`);
- the pure rules of the algorithm (`core.steering`);
- model loading (`core.models`, with `core.model_registry`, `core.gguf_cache`, `core.quantize`),
  the Linear layers' CPU kernel (`core.linear`), prompt templates (`core.prompts`) and the
  single-sequence KV cache with rollback (`core.kv`);
- the error root (`core.errors`), SPKI pins (`core.pins`), durable atomic writes (`core.fileio`),
  TOML config files read into dataclasses (`core.tomlfile`), the version (`core.version`) and the
  CLI plumbing every command shares (`core.cli`).

Nothing here imports `sdk`, `server`, `audit`, `privacy` or `federation`; see docs/architecture.md.
"""
