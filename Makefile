# Two commands matter: `make demo` (the whole pipeline locally) and `make test` (every test).
# Both build what they need; nothing has to be installed by hand first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv localstack-venv demo demo-spark test test-unit test-integration lint format bench deploy local-up local-down clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

demo: venv
	$(BIN)/python -m lakehouse.demo_spark

# The Spark pipeline alone over generated DMS files (no local AWS).
demo-spark: venv
	$(BIN)/python -m lakehouse.demo_spark

test: venv localstack-venv
	$(BIN)/python -m pytest

test-unit: venv
	$(BIN)/python -m pytest -m "not integration"

test-integration: venv localstack-venv
	$(BIN)/python -m pytest -m integration

# LocalStack (community, host mode, no Docker) in its own Python 3.13 venv, with our plugins.
localstack-venv: venv
	$(BIN)/python -m localaws.setup_venv

local-up: venv
	$(BIN)/python -m localaws.stack up

local-down:
	$(BIN)/python -m localaws.stack down

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf var .pytest_cache .ruff_cache .aws-sam
