# The two commands of the quick start are `make demo` and `make test`; both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup spark-archive prereqs browser demo test unit docs airflow lab bench bench-connect-memory soak up down status lint clean

## setup: the machine's prerequisites (Debian), the virtualenv (PyPI) and the jars (Maven Central); idempotent
setup: prereqs $(STAMP)
	@$(BIN)/eosflow stack fetch
	@# The checkout's own modules compiled too, for the same reason (the virtualenv's are, at install): a
	@# second or so, and nothing for a module unchanged since.
	@$(BIN)/python -m compileall -q -j 0 src dev/src plugins dags tests > /dev/null

## prereqs: Java 17, Maven, PostgreSQL 15 and Go from Debian's packages, installed when missing (as root)
prereqs:
	@bash infra/prereqs.sh

$(STAMP): pyproject.toml dev/pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "eosflow needs Python 3.11 ($(PYTHON) not on PATH): install it, or run make PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	@# The product, and beside it the dev tools' distribution (dev/: the stack, lab, bench, producer, demo),
	@# at the versions constraints.txt pins. uv installs them in about a third of pip's time (26 s against
	@# 69 s on the 2-core machines, caches warm); the product's own install instructions stay pip's.
	$(BIN)/pip install -q uv==0.13.9
	@# --compile-bytecode: every package's .pyc made once here, as pip makes them and uv does not by default.
	@# Without them, a machine with PYTHONDONTWRITEBYTECODE set (these are) compiles every module from source
	@# in every process: `import dbt.cli.main` took 3.75 CPU-seconds against 1.96, `airflow version` 3.5
	@# against 2.0, each Spark task's Python worker 1.1 against 0.5 (docs/development/tests.md).
	UV_LINK_MODE=copy $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -c constraints.txt -e '.[dev]' -e ./dev
	@# The Spark provider's pyspark-client overwrites pyspark's Python files; put 4.3.0 back every time.
	$(BIN)/pip install -q --force-reinstall --no-deps pyspark==4.3.0
	@# uv keeps each build of pyspark's sdist (0.9 GB) as a new revision, one per fresh clone's set-up: 47 of
	@# them filled a CI machine's disk (42 GB). Prune drops all but the one in use (8.4 GiB freed from 8).
	$(BIN)/uv cache prune -q
	@touch $(STAMP)

## browser: Debian's Chromium, for the Playwright test of the Airflow UI (never `playwright install`)
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium; \
	else \
		echo "the browser test needs /usr/bin/chromium: run as root: apt-get install chromium"; exit 1; \
	fi

## spark-archive: Spark's class-data-sharing archive (once, ~40 s): Spark sessions start seconds sooner; the
## demo's small plans never start one, so only the targets that run Spark sessions record it
spark-archive: $(STAMP)
	@$(BIN)/eosflow stack fetch --spark-archive

## demo: the main job end to end on the local stack
demo: setup
	$(BIN)/eosflow demo

## test: lint, types (mypy, configured in pyproject.toml), the docs site's strict build, then the whole suite
## against the real stack (unit, integration, Airflow, browser), ending with the 15 slowest tests so the suite's
## budget stays in view (every test's time is in test-artifacts/junit.xml). Three pytest-xdist workers by
## default (two are slower, four no faster: where the time goes is in docs/development/tests.md);
## TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= 3
test: setup browser
	$(BIN)/ruff check .
	@# Spark's class-data archive is recorded and the stack's servers start while mypy and the docs build
	@# run: the first two wait mostly on JVMs, the last two use a core (about a minute less than in a row).
	@set -e; \
	$(BIN)/eosflow stack fetch --spark-archive & archive=$$!; \
	$(BIN)/eosflow stack up & up=$$!; \
	$(BIN)/mypy; \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site; \
	wait $$archive; wait $$up
	$(BIN)/pytest -n $(TEST_WORKERS) --durations=15 --junitxml=test-artifacts/junit.xml $(PYTEST_ARGS)

## unit: every test that needs no stack (not marked integration), in under three minutes on two workers, with
## no server running: tests/no_stack.py points every port at one nothing listens on and fails a test that
## starts a server, so one that needs the stack cannot pass by finding yours
unit: $(STAMP)
	$(BIN)/pytest -p tests.no_stack -n $(TEST_WORKERS) -m "not integration" $(PYTEST_ARGS)

## docs: the documentation site into site/: the reference pages regenerated from the code, then
## mkdocs build --strict (a broken link, a missing anchor or a page outside the nav fails it); needs the
## virtualenv only, not the stack
docs: $(STAMP)
	$(BIN)/python docs/_gen/reference.py && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

## airflow: the Airflow UI against the stack, in the foreground (Ctrl-C stops it)
airflow: setup spark-archive
	$(BIN)/eosflow stack up --with spark-connect
	$(BIN)/eosflow airflow

## lab: the delivery-guarantee lab, every scenario x delivery mode, on a stack of its own (~20 min)
lab: setup spark-archive
	$(BIN)/eosflow lab --down

## bench: eosflow against Kafka's and Postgres' ceilings and the alternatives (BENCH_ARGS=--scaling ...)
bench: setup spark-archive
	$(BIN)/eosflow stack up
	$(BIN)/eosflow bench $(BENCH_ARGS)

## bench-connect-memory: the stack's Spark Connect server's memory over 200 consecutive runs (issue 46; ~10 min)
bench-connect-memory: setup
	$(BIN)/eosflow stack up
	$(BIN)/python -m eosflow_dev.bench.connect_memory $(BENCH_ARGS)

## soak: the randomized schedules, 1,000+ steps (EOSFLOW_SOAK_STEPS) for each runner (batch, kafka, iceberg, publisher,
## stream, changes: EOSFLOW_SOAK_RUNNERS) on a stack of its own (.stack/soak, Kafka 19292/19293, Postgres 15632,
## Connect 19283 for changes), stopped
## afterwards; reports in soak/results/<runner>.{md,json}, summed up in soak/results/latest.md
soak: setup spark-archive
	$(BIN)/python -m tests.random.soak

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
