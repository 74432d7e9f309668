#!/bin/bash
# Issue 51, after run.sh: the stop at gamma 0.2 with the same DP adapters, beside gamma 0.2 without it
# (the lower gamma keeps more of the device's drafts, which the stop now keeps from looping).
set -e
cd /work/wt-norepeat  # the same worktree, moved to 6935999 (git -C /work/wt-norepeat checkout --detach 6935999)
PY=/work/main/.venv/bin/python
COMMON="--data /work/shared/data/commit-bodies-dev.jsonl --threads 2 --work /work/bench-gate/work --runs /work/bench-norepeat/runs.jsonl --max-len 128 --rounds 1 --dp-steps 1 --personal-steps 2 --skip-v0-eval --queries-per-user 3 --no-repeats 6 --gammas 0.2"
nice -n 5 $PY -m bench.personal_loop $COMMON --cache-dir /work/bench-gate/cache-adapters --out /work/bench-norepeat/out-gamma \
   --rows 'specsteer+adapters (dp, gamma 0.2, no-repeat 6)' 'specsteer+adapters (dp, gamma 0.2)'
