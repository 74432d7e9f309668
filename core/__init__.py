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


The other modules:

- `core.adapter_files`: A device's federation state on disk, read without torch: where the adapters live,
  which global version is newest, the name a Specialist with them...
- `core.adapters`: Reading federated LoRA adapters and putting them onto a Specialist: what device and cloud
  share.
- `core.bundle`: A model bundle: the Specialist converted once, on a build machine, into the folder an app
  ships.
- `core.chat_template`: A model's chat template rendered as transformers renders it, without importing
  transformers.
- `core.device_lm`: A Specialist as a device needs it when its forwards run elsewhere: tokenizer, chat
  template, end-of-sequence ids and vocabulary width, loaded...
- `core.logs`: SpecSteer's one logger hierarchy, and how the command lines show it.
- `core.onnx_cache`: The ONNX conversion cache: a Hugging Face model folder converted once for
  onnxruntime-genai.
- `core.placement`: Where a model runs and in which float type: the checks behind `load_causal_lm(device=,
  dtype=)`.
- `core.recovery`: SpecSteer's device-side decision rules, as pure functions over numpy arrays: recovery (and
  the steered bonus token) and the draw of every token...
- `core.repetition`: The device's repetition stop: no token that would repeat an n-gram of the text generated
  so far.
- `core.sequence`: A growing token sequence on some backend's KV cache, with rollback: the bookkeeping every
  backend shares.
- `core.tls_identity`: A TLS identity (certificate chain and key), checked when it is loaded, before anything
  dials or serves.
"""
