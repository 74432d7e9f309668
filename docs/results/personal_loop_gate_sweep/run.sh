#!/bin/bash
# Issue 51, the gate swept over its certainty on the base weights (no adapters: nothing trains),
# shipped device path, 24 dev queries of 8 authors; the runs log starts from the committed
# personal_loop_gate log (llm, slm-rag, specsteer and the 0.5 gates reused, not rerun).
cd /work/wt-bench  # a snapshot of b0d1c9a: git worktree add --detach /work/wt-bench b0d1c9a
exec nice -n 15 /work/main/.venv/bin/python -m bench.personal_loop --data /work/shared/data/commit-bodies-dev.jsonl --threads 2 \
   --work /work/bench-gate/work --runs /work/bench-gate/sweep.runs.jsonl --cache-dir /work/bench-gate/cache \
   --out /work/bench-gate/out-sweep --max-len 128 --rounds 1 --dp-steps 1 --personal-steps 2 --skip-v0-eval \
   --queries-per-user 3 --gates 0.5:0.3:0.1,0.5:0.8:0.1 \
   --rows 'specsteer' 'specsteer (gamma 0.5, gate 0.5/0.1)' 'specsteer (gamma 0.5, gate 0.3/0.1)' 'specsteer (gamma 0.5, gate 0.8/0.1)'
