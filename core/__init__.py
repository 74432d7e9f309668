"""core: what the device and the cloud share, and nothing else of ours.

The wire contract (`core.proto`, `core.wire`), the session parameters (`core.session_types`),
the pure rules of the algorithm (`core.steering`), the one session contract over rounds
(`core.contract`), model loading, the Linear layers' CPU kernel and prompt templates both sides use
(`core.models`, `core.linear`, `core.prompts`), the single-sequence KV cache with rollback (`core.kv`), the error root
(`core.errors`) and the CLI plumbing every command shares (`core.cli`). Nothing here imports
`sdk`, `server`, `audit`, `privacy` or `federation`; see docs/architecture.md.
"""
