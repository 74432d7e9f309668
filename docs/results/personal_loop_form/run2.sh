#!/bin/bash
# Issue 51, after run.sh's adapters rows (its base rows were cut off while loading; resumed here, the
# runs log keys each generation): the form rule on the base weights, then the candidate count k swept
# with the same DP adapters (specsteer+adapters at gamma 0.5, k 3 and k 30 beside the default k 10).
set -e
cd /work/wt-form  # the same worktree, moved to c31a6fc (git -C /work/wt-form checkout --detach c31a6fc)
PY=/work/main/.venv/bin/python
COMMON="--data /work/shared/data/commit-bodies-dev.jsonl --threads 2 --work /work/bench-gate/work --runs /work/bench-form/form.runs.jsonl --max-len 128 --rounds 1 --dp-steps 1 --personal-steps 2 --skip-v0-eval --queries-per-user 3"
nice -n 5 $PY -m bench.personal_loop $COMMON --forms 0.5:0,0.5:0.1 --cache-dir /work/bench-gate/cache --out /work/bench-form/out-base \
   --rows 'specsteer (gamma 0.5, form 0)' 'specsteer (gamma 0.5, form 0.1)'
nice -n 5 $PY -m bench.personal_loop $COMMON --top-ks 3,30 --cache-dir /work/bench-gate/cache-adapters --out /work/bench-form/out-k \
   --rows 'specsteer+adapters (dp, gamma 0.5, k 3)' 'specsteer+adapters (dp, gamma 0.5, k 30)'
