#!/bin/bash
# Issue 51: DP adapters trained longer than personal_loop_gate's (the bench's default size: 2 rounds,
# 2 DP steps and 4 personal steps a round, instead of 1 round, 1 and 2), train only; resumable by
# rerunning this script (the state is kept per round in /work/bench-longer/work).
set -e
cd /work/wt-longer  # a snapshot of 2918fa9: git worktree add --detach /work/wt-longer 2918fa9
nice -n 5 /work/main/.venv/bin/python -m bench.personal_loop --data /work/shared/data/commit-bodies-dev.jsonl \
   --threads 2 --work /work/bench-longer/work --runs /work/bench-longer/runs.jsonl --out /work/bench-longer/out \
   --max-len 128 --rounds 2 --dp-steps 2 --personal-steps 4 --skip-v0-eval --queries-per-user 3 --train-only
