# capplan — `make run` serves the app, `make test` runs everything CI runs. Both set themselves up.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
CONSTRAINTS := constraints.txt
# torch for CPU comes from a local wheel directory when there is one; never pull CUDA wheels from PyPI.
TORCH_WHEELS ?= /opt/wheels
PIP_TORCH := $(if $(wildcard $(TORCH_WHEELS)/torch-*.whl),--find-links $(TORCH_WHEELS),)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint test-fast bench fuzz loadtest install-app install-dev lock clean check-exports

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.app-installed: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.dev-installed: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	@if [ -z "$(PIP_TORCH)" ]; then echo "note: no CPU torch wheel in $(TORCH_WHEELS); installing torch==2.13.0 from the index"; fi
	$(BIN)/pip install -q -c $(CONSTRAINTS) $(PIP_TORCH) -e '.[dev,bench]'
	touch $(VENV)/.app-installed $@

install-app: $(VENV)/.app-installed
install-dev: $(VENV)/.dev-installed

## run: set up .venv, migrate the SQLite database under var/, serve on http://$(HOST):$(PORT)
run: install-app
	mkdir -p var
	$(BIN)/capplan serve --host $(HOST) --port $(PORT)

## test: lint, import contracts, the whole pytest suite (PostgreSQL and browser tests run where available)
test: install-dev lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/ruff check app tests alembic
	$(BIN)/ruff format --check app tests alembic
	$(BIN)/lint-imports

test-fast: install-dev
	$(BIN)/python -m pytest -q -m "not e2e and not postgres" -x

## bench: print performance figures (estimates/s, plans/s, `capplan plan` cold start); behaviour is tested, speed is measured here
bench: install-dev
	$(BIN)/python -m app.perf

## fuzz: schemathesis over the OpenAPI schema (300 examples per operation; CI runs 8), the issue-15 probes and
## random HTML queries (1,200 per page), on SQLite and, with CAPPLAN_TEST_POSTGRES_URL set, PostgreSQL
fuzz: install-dev
	CAPPLAN_FUZZ_EXAMPLES=$${CAPPLAN_FUZZ_EXAMPLES:-300} $(BIN)/python -m pytest -q -n 2 tests/api/test_fuzz.py tests/web/test_fuzz_pages.py

## loadtest: 2 uvicorn workers on loopback, 8 clients for 30 s (CONCURRENCY=32 make loadtest for more); prints requests/s, p50/p95/p99, errors
loadtest: install-app
	$(BIN)/python scripts/loadtest.py --seconds $${SECONDS_:-30} --concurrency $${CONCURRENCY:-8} --workers 2

## check-exports: every export of a plan matrix fed to its real consumer (torchtitan, Megatron, DeepSpeed, CRD
## schemas, shellcheck, promtool, Grafana rules) in a separate CPU-only environment; fails on any rejection
EXPORTS_VENV := .venv-exports
EXPORTS_REQ := scripts/check_exports/requirements.txt
$(EXPORTS_VENV)/.installed: $(EXPORTS_REQ)
	$(PYTHON) -m venv $(EXPORTS_VENV)
	$(EXPORTS_VENV)/bin/python -m pip install -q --upgrade pip
	$(EXPORTS_VENV)/bin/pip install -q $(PIP_TORCH) torch==2.13.0
	DS_BUILD_OPS=0 $(EXPORTS_VENV)/bin/pip install -q --no-build-isolation $(PIP_TORCH) -c $(EXPORTS_REQ) -r $(EXPORTS_REQ)
	touch $@

check-exports: install-app $(EXPORTS_VENV)/.installed
	rm -rf var/check-exports
	PYTHONPATH=. $(BIN)/python scripts/check_exports/matrix.py var/check-exports
	$(EXPORTS_VENV)/bin/python scripts/check_exports/validate.py var/check-exports

## lock: regenerate constraints.txt from a fresh resolve of pyproject.toml (run after changing dependencies)
lock:
	rm -rf /tmp/capplan-lock && $(PYTHON) -m venv /tmp/capplan-lock
	/tmp/capplan-lock/bin/pip install -q $(PIP_TORCH) -e '.[dev,bench]'
	/tmp/capplan-lock/bin/pip freeze --exclude-editable | grep -v '^capplan' > $(CONSTRAINTS)

clean:
	rm -rf $(VENV) $(EXPORTS_VENV) .pytest_cache .ruff_cache test-results
