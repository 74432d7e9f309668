#!/usr/bin/env bash
# The whole GPU check in one run (issue 27), for the device machine: no network there, Python 3.12,
# torch and transformers as installed there (no registry to install the project's pins from, so the
# tree runs from PYTHONPATH=. and is never pip-installed).
#
#   run (device tool), carry [".venv/gpu-wheels", ".gpu-tokenizer"], command: bash tools/gpu_check.sh
#
# 1. Installs the test dependencies the machine lacks (pytest, gguf, bm25s, ...) from carried
#    wheels into a scratch folder on PYTHONPATH. Make the wheels here first (pure Python or
#    cp312 manylinux, about 46 MB):
#      .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 \
#        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d .venv/gpu-wheels \
#        pytest pluggy iniconfig pytest-timeout pygments gguf bm25s scipy cryptography cffi \
#        pycparser grpcio-health-checking pyyaml psutil detect-secrets phonenumbers python-stdnum \
#        mnemonic
#    Only those the machine lacks are installed (its image has pytest, scipy, pyyaml and psutil;
#    the device's egress guard in the end-to-end sweep needs detect-secrets, phonenumbers,
#    python-stdnum and mnemonic, which it has not). With .gpu-tokenizer about 58 MB of the 64 MiB a call may
#    carry. Dry-run it here first with the GPU machine's packages simulated (tools/gpu_machine/).
# 2. The CUDA tests: the cloud on cuda fp32 against the CPU and the oracles, bf16 agreement, the
#    merged forward, loading onto the GPU (tests/server/test_device_dtype.py), the slot pool's CUDA
#    graphs and its fused forward against transformers' logits (tests/server/test_slot_pool.py,
#    tests/server/test_fused_decoder.py), and the oracle tests.
# 3. The default part (GPU_CHECK_PART=next, what the next GPU session should run, one call):
#    python -m bench.gpu on the two pairs' configurations (Qwen2.5 0.5B/1.5B, Qwen3 0.6B/32B),
#    blocks 1..9, the slot pool on three paths (transformers' forward under CUDA graphs, the pool's
#    fused forward, the same compiled by inductor) in slots of a server's default 2048 positions
#    (64 sessions attending over their window and over the whole slots) into $OUT/next; then the
#    end-to-end sweep below in the time left.
#    GPU_CHECK_PART=bench: the first GPU session's full run (every configuration, eager, static
#    cache, the lean path, batched 1-128, whole rounds) and the 1.5B's pool compiled.
# Everything lands in $OUT: pytest's output, gpu.json, gpu.md, nvidia-smi and the versions; at the
# end the next part projects the paper's pair and prints issue 27's criteria (bench.gpu_verdict).
# The device tool brings back at most 8 files, so the run ends by packing all of $OUT into
# $OUT/gpu_check.tgz, leaving beside it only the JSON results and gpu_verdict.md.
#
# GPU_CHECK_PART=e2e runs only the end-to-end sweep (issue 27 #5): random-weight Qwen2.5 0.5B and
# 1.5B written there (bench.random_models) with the carried tokenizer, the Specialist flat and the
# Generalist's logits spread so that 80 % of sampled drafts pass the ratio test, then bench.speed with the
# verifier on the GPU (bf16, slot pool) and the device on the CPU, at RTT 0/20/50/100 ms, the rows
# issue 27 holds to the cost model only (llm, fusion, specsteer: sd and the guard-off row took a
# quarter of an RTT's time in the CPU dry run, and the sweep's time is short), into
# $OUT/e2e; then, if time is left, the live verifier's round against its blocks alone on the same
# models (bench.cloud_round). Carry the tokenizer too: copy a converted Qwen2.5 model's tokenizer.json,
# tokenizer_config.json and chat_template.jinja into .gpu-tokenizer/ (git-ignored) and add
# ".gpu-tokenizer" to carry. The default Generalist's conversion (made by `make demo`) has them:
#   mkdir -p .gpu-tokenizer && cp ~/.cache/specsteer/models/qwen2.5-coder-1.5b-instruct-*/{tokenizer.json,tokenizer_config.json,chat_template.jinja} .gpu-tokenizer/
# Ask for the H200 (nvidia-h200) where it matters: the 32B's 64 and 128 slots need its memory (on an
# H100 the pool takes the slots that fit and says so).
set -uo pipefail

BUDGET_S=${GPU_CHECK_BUDGET_S:-540}  # the device tool stops a command at 600 s
START=$(date +%s)
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
# A dry run elsewhere (this script on a CPU before a GPU session): GPU_CHECK_DEVICE=cpu
# GPU_CHECK_DTYPE=float32 GPU_CHECK_CONFIGS=tiny GPU_CHECK_E2E_PAIR=qwen2.5-0.5b,qwen2.5-0.5b.
DEVICE=${GPU_CHECK_DEVICE:-cuda}
DTYPE=${GPU_CHECK_DTYPE:-bfloat16}
CONFIGS=${GPU_CHECK_CONFIGS:-qwen2.5-0.5b,qwen3-0.6b,qwen2.5-1.5b,qwen3-32b}
IFS=, read -r E2E_SPECIALIST E2E_GENERALIST <<<"${GPU_CHECK_E2E_PAIR:-qwen2.5-0.5b,qwen2.5-1.5b}"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__, torch.cuda.is_available())'
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

PART=${GPU_CHECK_PART:-next}

# 1. Missing test dependencies, from the carried wheels.
missing=$($PY - <<'EOF'
import importlib.util
wanted = {"pytest": "pytest", "pluggy": "pluggy", "iniconfig": "iniconfig", "pytest_timeout": "pytest-timeout",
          "pygments": "pygments", "gguf": "gguf", "bm25s": "bm25s", "scipy": "scipy", "cryptography": "cryptography",
          "cffi": "cffi", "pycparser": "pycparser", "grpc_health": "grpcio-health-checking", "yaml": "pyyaml",
          "psutil": "psutil", "detect_secrets": "detect-secrets", "phonenumbers": "phonenumbers",
          "stdnum": "python-stdnum", "mnemonic": "mnemonic"}
print(" ".join(dist for module, dist in wanted.items() if importlib.util.find_spec(module) is None))
EOF
)
if [ -n "$missing" ]; then
  echo "installing from .venv/gpu-wheels: $missing"
  SITE=$(mktemp -d)
  $PY -m pip install --quiet --no-index --no-deps --find-links .venv/gpu-wheels --target "$SITE" $missing \
    >"$OUT/pip.txt" 2>&1 || { echo "pip failed: see pip.txt"; cat "$OUT/pip.txt"; }
  export PYTHONPATH=.:$SITE:${PYTHONPATH}
fi

e2e() {  # the end-to-end sweep into $OUT/e2e, until $1 seconds after START
  [ -f .gpu-tokenizer/tokenizer.json ] || { echo "e2e needs .gpu-tokenizer/ carried (see the header)"; return 2; }
  local models left
  models=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: the folder of this call
  trap "rm -rf '$models'" RETURN
  left=$(($1 - ($(date +%s) - START)))
  [ "$left" -ge 60 ] || { echo "e2e skipped: ${left}s left"; return 0; }  # (timeout 0 would mean no limit)
  # Acceptance built in (bench.random_models; sampled rows): 0.80 a draft, what the shipped pair measures.
  timeout "$left" $PY -m bench.random_models --tokenizer .gpu-tokenizer --configs "$E2E_SPECIALIST,$E2E_GENERALIST" \
    --acceptance 0.8 --specialist "$E2E_SPECIALIST" --out "$models" --device "$DEVICE" >"$OUT/e2e.txt" 2>&1
  left=$(($1 - ($(date +%s) - START)))
  [ "$left" -ge 30 ] || { echo "bench.speed skipped: ${left}s left" >>"$OUT/e2e.txt"; return 0; }
  # The device drafts on the CPU beside the verifier's threads (gRPC, the sessions, the CUDA launches):
  # with torch's threads on every core, each of those stalls its forwards (bench.colocated_steps), so
  # with the cloud on the card it leaves them two cores. On the CPU the two share every core anyway.
  local threads=()
  [ "$DEVICE" = cpu ] || threads=(--device-threads "$(($(nproc) > 3 ? $(nproc) - 2 : 1))")
  timeout "$left" $PY -m bench.speed --specialist "$models/$E2E_SPECIALIST" --generalist "$models/$E2E_GENERALIST" \
    --cloud-device "$DEVICE" --cloud-dtype "$DTYPE" --kv slots --sampling --methods fusion,specsteer \
    ${threads[@]+"${threads[@]}"} \
    --rtts 0 20 50 100 --queries 1 \
    --max-new-tokens 32 \
    --baseline-reps 1 --no-llamacpp --out "$OUT/e2e" --tag speed_gpu >>"$OUT/e2e.txt" 2>&1
  echo "bench.speed exit $?" >>"$OUT/e2e.txt"
  tail -30 "$OUT/e2e.txt"
  # Then, if the sweep left time: the live verifier's round (its session code: contract, forwards,
  # log-softmax, ratio test, steering) against its blocks alone, one session, nothing beside it.
  # After the sweep, not before: the sweep is what issue 27 holds to the cost model.
  left=$(($1 - ($(date +%s) - START)))
  if [ "$left" -ge 40 ]; then
    local rounds=40 round_methods=specsteer,fusion,sd,llm
    # A dry run's forwards of the real configurations take a tenth of a second and more each here.
    [ "$DEVICE" != cpu ] || { rounds=4; round_methods=specsteer; }
    timeout "$((left - 5))" $PY -m bench.cloud_round --specialist "$models/$E2E_SPECIALIST" \
      --generalist "$models/$E2E_GENERALIST" --device "$DEVICE" --dtype "$DTYPE" --kv slots --sampling \
      --methods "$round_methods" --rounds "$rounds" --out "$OUT/e2e" >"$OUT/cloud_round.txt" 2>&1
    echo "bench.cloud_round exit $?" >>"$OUT/cloud_round.txt"
    tail -12 "$OUT/cloud_round.txt"
  else
    echo "bench.cloud_round skipped: ${left}s left" >"$OUT/cloud_round.txt"
  fi
}

verdict() {  # issue 27's criteria off this run's JSON (bench.gpu_verdict), the paper pair projected first
  local args=(--gpu "$OUT/next/gpu.json")
  [ -f "$OUT/e2e/speed_gpu.json" ] && args+=(--e2e "$OUT/e2e/speed_gpu.json")
  [ -f "$OUT/e2e/cloud_round.json" ] && args+=(--cloud-round "$OUT/e2e/cloud_round.json")
  # The device's figures: the shipped int4 drafter on this project's CPU (docs/results/gpu_projection_onnx_int4.md),
  # and its work around its forwards there (docs/results/device_work.md).
  if $PY -m bench.gpu_projection --gpu "$OUT/next/gpu.json" --generalist qwen3-32b --specialist qwen3-0.6b \
    --mean-accepted 2.37 --draft-len 4 --draft-step-ms 18.9 --name gpu_projection_onnx_int4 --out "$OUT/next" \
    --device-work docs/results/device_work.json \
    >"$OUT/next/projection.txt" 2>&1; then
    args+=(--projection "$OUT/next/gpu_projection_onnx_int4.json")
  fi
  $PY -m bench.gpu_verdict "${args[@]}" --out "$OUT"
}

finish() {  # the device tool brings back at most 8 files: everything in one archive, beside the main JSON
  local archive
  archive=$(mktemp -u /tmp/gpu_check.XXXXXX.tgz)
  tar czf "$archive" -C "$OUT" . || return
  find "$OUT" -type f ! -name gpu.json ! -name speed_gpu.json ! -name gpu_verdict.md -delete
  mv "$archive" "$OUT/gpu_check.tgz"
  (cd "$OUT" && find . -type f | sort)
}

if [ "$PART" = e2e ]; then
  e2e "$BUDGET_S"
  finish
  echo "gpu_check e2e done in $(($(date +%s) - START)) s"
  exit 0
fi

# 2. The CUDA tests (they skip nothing here but the no-GPU refusals); at most 3 minutes.
if [ -z "${GPU_CHECK_SKIP_TESTS:-}" ]; then
timeout 170 $PY -m pytest tests/server/test_fused_decoder.py tests/server/test_slot_pool.py \
  tests/server/test_device_dtype.py tests/test_oracles.py -q \
  -p no:cacheprovider \
  -m "not slow" -rs -s >"$OUT/pytest.txt" 2>&1
echo "pytest exit $?" >>"$OUT/pytest.txt"
tail -25 "$OUT/pytest.txt"
fi

if [ "$PART" = next ]; then
  # 3. The pool's paths on both pairs' configurations (about 4 minutes), then the sweep in the rest.
  LEFT=$((BUDGET_S - ($(date +%s) - START)))
  echo "bench.gpu (pool paths) with ${LEFT}s left"
  mkdir -p "$OUT/next"
  # bench.gpu keeps to its deadline between measurements; the timeout bounds one that overruns it
  # (its JSON is rewritten after every configuration, so what was measured stays).
  timeout "$((LEFT * 3 / 5 + 60))" $PY -m bench.gpu --device "$DEVICE" --dtype "$DTYPE" --configs "$CONFIGS" \
    --batches 1,64 --pool-batches 1,64 --round-batches 1,64 --pool-paths graphs,fused,fused+compiled --slot-len 2048 \
    --compile-configs qwen2.5-1.5b,qwen3-32b --compile-min-s 30 \
    --deadline-s "$((LEFT * 3 / 5))" --out "$OUT/next" >"$OUT/next/bench.txt" 2>&1
  echo "bench.gpu exit $?" >>"$OUT/next/bench.txt"
  tail -12 "$OUT/next/bench.txt"
  LEFT=$((BUDGET_S - ($(date +%s) - START)))
  echo "e2e with ${LEFT}s left"
  e2e "$((BUDGET_S - 15))"
  verdict
  finish
  echo "gpu_check next done in $(($(date +%s) - START)) s"
  exit 0
fi

# 3. The benchmark in the time left: every configuration uncompiled first (the lean path needs no
#    compiler), then the 1.5B's slot pool compiled, if at least 120 s are left.
LEFT=$((BUDGET_S - ($(date +%s) - START)))
echo "bench.gpu with ${LEFT}s left"
# shellcheck disable=SC2086  # the extra arguments are meant to split
$PY -m bench.gpu --device cuda --dtype bfloat16 --deadline-s "$((LEFT - 20))" --out "$OUT" ${GPU_CHECK_BENCH_ARGS:-} \
  >"$OUT/bench.txt" 2>&1
echo "bench.gpu exit $?" >>"$OUT/bench.txt"
tail -20 "$OUT/bench.txt"
LEFT=$((BUDGET_S - ($(date +%s) - START)))
if [ "$LEFT" -ge 120 ]; then
  echo "bench.gpu --pool-paths compiled with ${LEFT}s left"
  $PY -m bench.gpu --device cuda --dtype bfloat16 --configs qwen2.5-1.5b --pool-paths compiled,fused+compiled \
    --blocks 1,5 --compiled-blocks 1 --batches 1 --pool-batches 1,64 --deadline-s "$((LEFT - 10))" \
    --out "$OUT/compiled" >>"$OUT/bench.txt" 2>&1
  echo "bench.gpu --pool-paths compiled exit $?" >>"$OUT/bench.txt"
fi
finish
echo "gpu_check done in $(($(date +%s) - START)) s"
