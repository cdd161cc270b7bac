# One entry point for setup, tests, the demo and benchmarks. Everything is installed by the
# project itself: Python packages into .venv, broker distributions into .cache/ (via Maven).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup tools brokers delta lint test unit flake demo bench clean

setup: tools $(STAMP) brokers delta

tools:
	@PYTHON=$(PYTHON) bash scripts/ensure_tools.sh

# pyproject.toml states ranges; conf/constraints.txt pins the versions CI tests. A change to
# either, or to the version (the installed metadata carries it), re-installs.
$(STAMP): pyproject.toml conf/constraints.txt connector/clustermq/version.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c conf/constraints.txt -e '.[test]'
	touch $(STAMP)

# The pinned Delta jars (clustermq/pipelines/delta_pom.xml) into .cache/clustermq/delta/:
# SparkSessions read them from there and never download at start.
delta: $(STAMP)
	$(BIN)/python -m clustermq.pipelines.delta_jars

# The broker distributions into .cache/clustermq/dist/ (what `clustermq cluster fetch` does for
# a pip-installed package): `clustermq cluster up` never downloads.
brokers: $(STAMP)
	$(BIN)/clustermq cluster fetch --flavor classic --flavor artemis

# Style and types first: a minute of lint before twenty of brokers and Spark.
lint: $(STAMP)
	$(BIN)/ruff check connector tests spark_jobs
	$(BIN)/mypy

# Two pytest-xdist workers, one per broker flavor, each with its own clusters and Spark session;
# a test of no flavor, or of a module with clusters of its own, goes with the rest of its module
# to whichever worker is free (tests/conftest.py, worker_group). TEST_WORKERS=0 runs one process.
TEST_WORKERS ?= 2
test: setup lint
	$(BIN)/python -m pytest -q --tb=short --durations=30 --basetemp=.cache/pytest \
		$(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))

# Every test that needs no broker and no Spark, chosen by marker (tests/conftest.py marks a test
# by the processes its fixtures start): seconds, run them often.
unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not cluster and not spark" -p no:cacheprovider

# Pass rate per test over RUNS runs in a row (scripts/flake.py), LOAD=1 with one core kept busy
# as on a shared CI machine: make flake TESTS="tests/test_pairs.py -k killed" RUNS=20 LOAD=1
RUNS ?= 10
TESTS ?= tests
flake: setup
	$(BIN)/python scripts/flake.py --runs $(RUNS) $(if $(filter 1,$(LOAD)),--load) $(TESTS)

# Both flavors, every comparison as 3 alternating baseline/candidate runs at 0.3 of the full sizes
# (60,000 messages per run), the memory step at its full 1,000,000 (a slow leak shows only over
# a long drain); BENCH_SCALE=1 runs the full sizes everywhere.
BENCH_SCALE ?= 0.3
BENCH_MEMORY_MESSAGES ?= 1000000

bench: setup
	$(BIN)/python -m clustermq.devtools.bench.run --scale $(BENCH_SCALE) --memory-messages $(BENCH_MEMORY_MESSAGES) --out bench-results --doc docs/benchmarks.md --readme README.md

demo: setup
	$(BIN)/clustermq demo

clean:
	rm -rf $(VENV) .cache .pytest_cache
