# The two commands of the quick start are `make demo` and `make test`; both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test airflow up down status lint clean

## setup: the virtualenv (Python packages from PyPI) and the jars (Maven Central); idempotent
setup: $(STAMP)
	@$(BIN)/eosflow stack fetch

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "eosflow needs Python 3.11 ($(PYTHON) not on PATH): install it, or run make PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	@# The Spark provider's pyspark-client overwrites pyspark's Python files; put 4.3.0 back every time.
	$(BIN)/pip install -q --force-reinstall --no-deps pyspark==4.3.0
	@touch $(STAMP)

## demo: the main job end to end on the local stack
demo: setup
	$(BIN)/eosflow demo

## test: the whole suite against the real stack (unit and integration)
test: setup
	$(BIN)/eosflow stack up
	$(BIN)/pytest

## airflow: the Airflow UI against the stack, in the foreground (Ctrl-C stops it)
airflow: setup
	$(BIN)/eosflow stack up
	$(BIN)/eosflow airflow

up: setup
	$(BIN)/eosflow stack up
down:
	$(BIN)/eosflow stack down
status:
	$(BIN)/eosflow stack status

lint:
	$(BIN)/ruff check .

clean: down
	rm -rf $(VENV) .stack
