# Thin wrappers around the project's tools; CONTRIBUTING.md documents each.
# `make test` works on a fresh clone: it creates the virtualenv when missing.
# Override VENV to use another one (CI points it at a temporary directory).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# remembers that this venv has the project installed (redone when pyproject.toml changes)
STAMP := $(VENV)/.pgsurge-installed
PYTEST_ARGS ?=

.PHONY: dev lint typecheck docs test test-unit test-server test-fast test-pure test-system-python

dev: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev,docs]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# the user guide, warnings as errors (not --quiet: it hides the warnings
# that strict mode counts)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# the differential run tests that the pure-Python lane repeats
PURE_TESTS := tests/unit tests/server/test_run_diff.py tests/server/test_eval_diff.py \
	tests/server/test_debug_diff.py tests/server/test_deep_chain.py \
	tests/server/test_prepare_run.py tests/server/test_run.py

# everything; tests that need PostgreSQL fail (not skip) when none can be had
test: $(STAMP)
	$(BIN)/python -m pytest -q --require-server $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

test-server: $(STAMP)
	$(BIN)/python -m pytest -q --require-server -m server tests/server $(PYTEST_ARGS)

# everything but the tests marked slow (2 s or more each)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q --require-server -m "not slow" $(PYTEST_ARGS)

# the C extensions off (PGSURGE_PURE=1): the unit tests and the differential
# run tests against pgbench, on the pure-Python engine
test-pure: $(STAMP)
	PGSURGE_PURE=1 $(BIN)/python -m pytest -q --require-server -m "not slow" \
		$(PURE_TESTS) $(PYTEST_ARGS)

# the script reader's tests and PostgreSQL's TAP cases under the system
# python3 (Debian 12's is 3.11.2, whose re matched possessive quantifiers
# wrongly: issue 21 item 15), in a venv of its own; needs python3-venv
# (and python3-dev for the C extensions)
SYSTEM_PYTHON ?= /usr/bin/python3
SYSTEM_VENV ?= .venv-system
SYSTEM_STAMP := $(SYSTEM_VENV)/.pgsurge-installed
READER_TESTS := tests/unit/test_regex_portable.py tests/unit/test_splitter.py \
	tests/unit/test_parser.py tests/unit/test_script_errors.py \
	tests/unit/test_script_props.py tests/unit/test_parse_fast.py \
	tests/unit/test_parse_linear.py tests/unit/test_fastparse.py \
	tests/server/test_pg_tap_cases.py
# without the C extensions the reader's own tests again (the TAP cases run
# once, above: the regexes they exercise are the same with C off)
READER_UNIT_TESTS := $(filter tests/unit/%,$(READER_TESTS))

$(SYSTEM_STAMP): pyproject.toml
	test -x $(SYSTEM_VENV)/bin/python || $(SYSTEM_PYTHON) -m venv $(SYSTEM_VENV)
	$(SYSTEM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
	touch $(SYSTEM_STAMP)

test-system-python: $(SYSTEM_STAMP)
	$(SYSTEM_VENV)/bin/python --version
	$(SYSTEM_VENV)/bin/python -m pytest -q --require-server $(READER_TESTS) $(PYTEST_ARGS)
	PGSURGE_PURE=1 $(SYSTEM_VENV)/bin/python -m pytest -q $(READER_UNIT_TESTS) $(PYTEST_ARGS)
