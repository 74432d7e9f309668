#!/bin/bash
# Issue 51, after train.sh: the longer training's adapters on the shipped device path, 24 dev queries of
# 8 authors: the device alone and SpecSteer (gamma 0.5) with them, then both under the repetition stop n 3.
# Each device's cache links the base models of /work/bench-gate's (disk), its merged conversion its own.
set -e
cd /work/wt-longer
nice -n 5 /work/main/.venv/bin/python -m bench.personal_loop --data /work/shared/data/commit-bodies-dev.jsonl \
   --threads 2 --work /work/bench-longer/work --runs /work/bench-longer/runs.jsonl --out /work/bench-longer/out \
   --max-len 128 --rounds 2 --dp-steps 2 --personal-steps 4 --skip-v0-eval --queries-per-user 3 --no-repeats 3 \
   --cache-dir /work/bench-longer/cache-adapters \
   --rows 'slm-rag+adapters (dp)' 'specsteer+adapters (dp)' 'slm-rag+adapters (dp, no-repeat 3)' 'specsteer+adapters (dp, gamma 0.5, no-repeat 3)'
