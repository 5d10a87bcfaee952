# The two entry points on a fresh machine: `make demo` and `make test`. Both run setup first;
# setup is idempotent and skips whatever is already in place.
SHELL := /bin/bash
VENV := .venv
CARGO ?= cargo
export CARGO_BUILD_JOBS ?= 2

.PHONY: setup build demo test lint test-rust test-lit test-python test-slow zoo zoo-modes

setup:
	@bash scripts/setup.sh

# Everything Rust builds with the release profile, the extension's (`maturin develop --release`
# in setup): clippy, the tests and the CLIs then reuse its compiled dependencies, build scripts
# and proc macros instead of building them again for the dev profile (2 cores, after the
# extension's build: clippy 37 s instead of 220 s).
PROFILE := --release
BIN := target/release

build: setup
	$(CARGO) build $(PROFILE) --workspace --exclude torchtpu-python --bins

demo: build
	$(VENV)/bin/python examples/quickstart.py
	$(VENV)/bin/python examples/device_quickstart.py
	$(BIN)/torchtpu-opt examples/mlp.ir --pass-pipeline=canonicalize,fold-constants,cse,dce --timing
	$(BIN)/torchtpu-run examples/transformer_block.ir

test: setup
	$(MAKE) --no-print-directory lint test-rust test-lit test-python

# Formatting (rustfmt.toml) and clippy with every warning an error, over all targets; ruff's
# formatter and linter over python/ (rules in python/pyproject.toml, docs/architecture.md "Lint").
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy $(PROFILE) --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff format --check python
	$(VENV)/bin/ruff check python

test-rust:
	$(CARGO) test $(PROFILE) --workspace --exclude torchtpu-python

# The binaries with the workspace's features, as test-rust built them (`-p` alone unifies
# features differently and rebuilt dependencies).
test-lit:
	$(CARGO) build $(PROFILE) --workspace --exclude torchtpu-python --bins
	$(VENV)/bin/lit -sv lit-tests

# Two workers (pytest-xdist), each taking whole files (tests of one file share a process and its
# order, as in a serial run); PYTEST_WORKERS=0 runs serially. The slowest tests are listed.
PYTEST_WORKERS ?= 2
# Tests marked `slow` (long sweeps, other modes of paths covered here) run in `make test-slow`.
test-python:
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=40 -m "not slow" python/tests

test-slow: setup
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=25 -m slow python/tests

# The full model zoo: every model of python/tests/models/zoo.py vs eager; writes docs/model-coverage.md.
zoo: setup
	$(VENV)/bin/python python/tests/models/run_zoo.py

# The zoo also on the tpu device in every mode (strict, DeferAndFuse, torch.compile on tpu
# tensors), each vs CPU eager; writes both tables of docs/model-coverage.md (~35 minutes).
zoo-modes: setup
	$(VENV)/bin/python python/tests/models/run_zoo.py --device-modes
