# Thin wrappers around the project's tools; CONTRIBUTING.md documents each.
# `make test` works on a fresh clone: it creates the virtualenv when missing.
# Override VENV to use another one (CI points it at a temporary directory).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# remembers that this venv has the project installed (redone when pyproject.toml changes)
STAMP := $(VENV)/.pgsurge-installed
PYTEST_ARGS ?=

.PHONY: dev lint typecheck test test-unit test-server

dev: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# everything; tests that need PostgreSQL fail (not skip) when none can be had
test: $(STAMP)
	$(BIN)/python -m pytest -q --require-server $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

test-server: $(STAMP)
	$(BIN)/python -m pytest -q --require-server -m server tests/server $(PYTEST_ARGS)
