#!/bin/bash
# Issue 51: the device's repetition stop (n 6, bench.no_repeat_choice) on the shipped device path,
# 24 dev queries of 8 authors. The runs log starts from personal_loop_form's (nothing there is generated again).
# 1. With the DP adapters of /work/bench-gate (personal_loop_gate's second training): slm-rag and
#    specsteer (gamma 0.5) under the stop. 2. On the base weights: the same two.
set -e
cd /work/wt-norepeat  # a snapshot of ce72b80: git worktree add --detach /work/wt-norepeat ce72b80
PY=/work/main/.venv/bin/python
COMMON="--data /work/shared/data/commit-bodies-dev.jsonl --threads 2 --work /work/bench-gate/work --runs /work/bench-norepeat/runs.jsonl --max-len 128 --rounds 1 --dp-steps 1 --personal-steps 2 --skip-v0-eval --queries-per-user 3 --no-repeats 6"
nice -n 5 $PY -m bench.personal_loop $COMMON --cache-dir /work/bench-gate/cache-adapters --out /work/bench-norepeat/out-adapters \
   --rows 'specsteer+adapters (dp, gamma 0.5, no-repeat 6)' 'slm-rag+adapters (dp, no-repeat 6)'
nice -n 5 $PY -m bench.personal_loop $COMMON --cache-dir /work/bench-gate/cache --out /work/bench-norepeat/out-base \
   --rows 'specsteer (gamma 0.5, no-repeat 6)' 'slm-rag (no-repeat 6)'
