#!/bin/bash
# Issue 51: the form rule (docs/algorithm.md) on the shipped device path, 24 dev queries of 8 authors.
# 1. With the DP adapters of /work/bench-gate (personal_loop_gate's second training; their
#    slm-rag+adapters and specsteer+adapters rows are in the runs log, which starts from
#    personal_loop_gate_sweep's: nothing of it is generated again), gamma 0.5 with gamma_form 0 and 0.1.
# 2. On the base weights (nothing trains), the same two rules beside the paper's rule.
set -e
cd /work/wt-form  # a snapshot of 24b2738: git worktree add --detach /work/wt-form 24b2738
PY=/work/main/.venv/bin/python
COMMON="--data /work/shared/data/commit-bodies-dev.jsonl --threads 2 --work /work/bench-gate/work --runs /work/bench-form/form.runs.jsonl --max-len 128 --rounds 1 --dp-steps 1 --personal-steps 2 --skip-v0-eval --queries-per-user 3 --forms 0.5:0,0.5:0.1"
nice -n 5 $PY -m bench.personal_loop $COMMON --cache-dir /work/bench-gate/cache-adapters --out /work/bench-form/out-adapters \
   --rows 'specsteer+adapters (dp, gamma 0.5, form 0)' 'specsteer+adapters (dp, gamma 0.5, form 0.1)'
nice -n 5 $PY -m bench.personal_loop $COMMON --cache-dir /work/bench-gate/cache --out /work/bench-form/out-base \
   --rows 'specsteer (gamma 0.5, form 0)' 'specsteer (gamma 0.5, form 0.1)'
