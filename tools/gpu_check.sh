#!/usr/bin/env bash
# The whole GPU check in one run (issue 27), for the device machine: no network there, Python 3.12,
# torch and transformers as installed (the project's requires-python excludes 3.12, so the tree
# runs from PYTHONPATH=. and is never pip-installed).
#
#   run (device tool), carry [".venv/gpu-wheels"], command: bash tools/gpu_check.sh
#
# 1. Installs the test dependencies the machine lacks (pytest, gguf, bm25s, ...) from carried
#    wheels into a scratch folder on PYTHONPATH. Make the wheels here first (pure Python or
#    cp312 manylinux, about 42 MB):
#      .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 \
#        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d .venv/gpu-wheels \
#        pytest pluggy iniconfig pytest-timeout pygments gguf bm25s scipy cryptography cffi \
#        pycparser grpcio-health-checking pyyaml psutil
# 2. The CUDA tests: the cloud on cuda fp32 against the CPU and the oracles, bf16 agreement, the
#    merged forward, loading onto the GPU (tests/server/test_device_dtype.py), the slot pool's CUDA
#    graphs against transformers' logits (tests/server/test_slot_pool.py), and the oracle tests.
# 3. python -m bench.gpu --device cuda: every configuration, eager, static cache and the lean path
#    (slot pool, CUDA-graph replays, whole rounds), the 32B last (partial JSON after each one);
#    then, in the time left, the 1.5B's slot pool compiled (inductor under the graphs) into $OUT/compiled.
# Everything lands in $OUT: pytest's output, gpu.json, gpu.md, nvidia-smi and the versions.
#
# GPU_CHECK_PART=e2e runs the end-to-end sweep instead (issue 27 #5): random-weight Qwen2.5 0.5B and
# 1.5B written there (bench.random_models) with the carried tokenizer, then bench.speed with the
# verifier on the GPU (bf16, slot pool) and the device on the CPU, at RTT 0/20/50/100 ms, into
# $OUT/e2e. Carry the tokenizer too: copy a converted Qwen2.5 model's tokenizer.json,
# tokenizer_config.json and chat_template.jinja into .gpu-tokenizer/ (git-excluded here) and add
# ".gpu-tokenizer" to carry.
# Ask for the H200 (nvidia-h200): the 32B's 64 and 128 slots need its memory.
set -uo pipefail

BUDGET_S=${GPU_CHECK_BUDGET_S:-480}  # the device tool stops a command at 600 s
START=$(date +%s)
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
export PYTHONPATH=.:${PYTHONPATH:-}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__, torch.cuda.is_available())'
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

PART=${GPU_CHECK_PART:-bench}

# 1. Missing test dependencies, from the carried wheels.
missing=$($PY - <<'EOF'
import importlib.util
wanted = {"pytest": "pytest", "pluggy": "pluggy", "iniconfig": "iniconfig", "pytest_timeout": "pytest-timeout",
          "pygments": "pygments", "gguf": "gguf", "bm25s": "bm25s", "scipy": "scipy", "cryptography": "cryptography",
          "cffi": "cffi", "pycparser": "pycparser", "grpc_health": "grpcio-health-checking", "yaml": "pyyaml",
          "psutil": "psutil"}
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

if [ "$PART" = e2e ]; then
  [ -f .gpu-tokenizer/tokenizer.json ] || { echo "e2e needs .gpu-tokenizer/ carried (see the header)"; exit 2; }
  MODELS=$(mktemp -d)
  $PY -m bench.random_models --tokenizer .gpu-tokenizer --configs qwen2.5-0.5b,qwen2.5-1.5b --out "$MODELS" \
    --device cuda >"$OUT/e2e.txt" 2>&1
  LEFT=$((BUDGET_S - ($(date +%s) - START)))
  timeout "$LEFT" $PY -m bench.speed --specialist "$MODELS/qwen2.5-0.5b" --generalist "$MODELS/qwen2.5-1.5b" \
    --cloud-device cuda --cloud-dtype bfloat16 --kv slots --rtts 0 20 50 100 --queries 1 --max-new-tokens 32 \
    --no-llamacpp --out "$OUT/e2e" --tag speed_gpu >>"$OUT/e2e.txt" 2>&1
  echo "bench.speed exit $?" >>"$OUT/e2e.txt"
  tail -30 "$OUT/e2e.txt"
  echo "gpu_check e2e done in $(($(date +%s) - START)) s"
  exit 0
fi

# 2. The CUDA tests (they skip nothing here but the no-GPU refusals); at most 3 minutes.
if [ -z "${GPU_CHECK_SKIP_TESTS:-}" ]; then
timeout 170 $PY -m pytest tests/server/test_slot_pool.py tests/server/test_device_dtype.py tests/test_oracles.py -q \
  -p no:cacheprovider \
  -m "not slow" -rs -s >"$OUT/pytest.txt" 2>&1
echo "pytest exit $?" >>"$OUT/pytest.txt"
tail -25 "$OUT/pytest.txt"
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
  echo "bench.gpu --pool-compiled with ${LEFT}s left"
  $PY -m bench.gpu --device cuda --dtype bfloat16 --configs qwen2.5-1.5b --pool-compiled --blocks 1,5 \
    --compiled-blocks 1 --batches 1 --pool-batches 1,64 --deadline-s "$((LEFT - 10))" --out "$OUT/compiled" \
    >>"$OUT/bench.txt" 2>&1
  echo "bench.gpu --pool-compiled exit $?" >>"$OUT/bench.txt"
fi
echo "gpu_check done in $(($(date +%s) - START)) s"
