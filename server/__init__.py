"""server: the cloud verifier (the `[cloud]` extra): the Generalist and a generic Specialist copy,
the gRPC service over mutual TLS, admission, batching, KV memory, the witness and the PKI.

Its modules:

- `server.admission`: Who gets a session slot, and how fast a device may start streams: the verifier's fair
  admission.
- `server.batching`: Where the verifier's model work runs, and how concurrent sessions share forward passes.
- `server.cli`: `server`: the SpecSteer cloud verifier, and the PKI it and its devices use.
- `server.config`: The verifier's configuration: a TOML file, then command-line overrides, then checks.
- `server.device_identity`: Device certificates checked as X.509 paths to the device CA, by `cryptography`'s
  verifier.
- `server.errors`: The verifier's errors, in one place, under `core.errors.SpecSteerError` so one `except` in
  a CLI catches all.
- `server.front`: A TCP front for the verifier's public port: a per-source connection cap before anything
  else.
- `server.fused_decoder`: The slot pool's own decoder forward for the families we ship (issue 27): fused
  projections and compiled regions, for the verify block at the GPU's...
- `server.generalist`: The Generalist's side of a cloud session, in one of two forms.
- `server.grpc_server`: Build, then serve: the verifier as a gRPC server over mutually authenticated TLS.
- `server.kv_batch`: Merged forwards of several sessions' sequences of one model: the verifier's batching
  kernel.
- `server.kv_budget`: One memory budget for every session's dynamic KV cache (the default `kv = "dynamic"`
  engine).
- `server.local`: The cloud verifier in the device's process: what `sdk generate` without `--server` runs
  against.
- `server.metrics`: Prometheus metrics of one verifier: sessions, rounds, acceptance, batch sizes, latency.
- `server.pki`: A small, working PKI for the verifier and its devices, made with `cryptography`.
- `server.revocation`: Per-certificate revocation: a list of revoked device certificates, re-read when it changes.
- `server.preflight`: Everything `server serve` can refuse before a model library is imported.
- `server.service`: The Verifier servicer: one bidirectional stream per generation session, parsed strictly
  here.
- `server.session`: The cloud verifier: Generalist P_G and the generic Specialist copy P_S^0, one session per
  generation.
- `server.slot_pool`: The verifier's lean path (issue 27): per-session KV in fixed buffers, forwards of fixed
  shapes that a CUDA graph replays, and a verify round's...
- `server.slot_sequence`: A session's tokens on one slot of a `SlotPool`: the `CachedSequence` the verifier
  uses when its KV engine is the slot pool (`server serve --kv...
- `server.vocab`: Token IDs <-> text for cross-vocabulary pairs, where committed text is the source of truth.
- `server.witness`: The verifier as each device log's witness (C2SP tlog-witness's checks, over our gRPC
  stream).
"""
