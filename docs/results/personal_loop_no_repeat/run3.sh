#!/bin/bash
# Issue 51, after run2.sh: a stronger stop, n 3 (it would rule out 2.6 % of the dev authors' own tokens,
# bench.no_repeat_choice), with the same DP adapters: slm-rag and specsteer (gamma 0.5) under it.
set -e
cd /work/wt-norepeat  # at 6935999
PY=/work/main/.venv/bin/python
COMMON="--data /work/shared/data/commit-bodies-dev.jsonl --threads 2 --work /work/bench-gate/work --runs /work/bench-norepeat/runs.jsonl --max-len 128 --rounds 1 --dp-steps 1 --personal-steps 2 --skip-v0-eval --queries-per-user 3 --no-repeats 3"
nice -n 5 $PY -m bench.personal_loop $COMMON --cache-dir /work/bench-gate/cache-adapters --out /work/bench-norepeat/out-n3 \
   --rows 'specsteer+adapters (dp, gamma 0.5, no-repeat 3)' 'slm-rag+adapters (dp, no-repeat 3)'
