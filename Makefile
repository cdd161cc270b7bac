# One entry point for setup, tests, the demo and benchmarks. Everything is installed by the
# project itself: Python packages into .venv, broker distributions into .cache/ (via Maven).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup tools brokers delta lint test unit demo bench clean

setup: tools $(STAMP) brokers delta

tools:
	@PYTHON=$(PYTHON) bash scripts/ensure_tools.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# The pinned Delta jars (conf/delta/pom.xml) into .cache/clustermq/delta/: SparkSessions read
# them from there and never download at start.
delta: $(STAMP)
	$(BIN)/python -m clustermq.pipelines.delta_jars

brokers: $(STAMP)
	PYTHON=$(BIN)/python bash scripts/fetch_brokers.sh classic artemis

# Style and types first: a minute of lint before twenty of brokers and Spark.
lint: $(STAMP)
	$(BIN)/ruff check connector tests spark_jobs
	$(BIN)/mypy

test: setup lint
	$(BIN)/python -m pytest -q --tb=short --durations=30 --basetemp=.cache/pytest

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_units.py tests/test_writer_units.py tests/test_pipelines_units.py tests/test_amqp_units.py tests/test_readme.py tests/test_layout.py

# Both flavors, every comparison as 3 alternating baseline/candidate runs: 0.3 of the full sizes
# (60,000 messages per run, 300,000 for memory) took 13.1 min on 2 cores shared with other work
# (0.1: 4.9 min); BENCH_SCALE=1 runs the full sizes.
BENCH_SCALE ?= 0.3

bench: setup
	$(BIN)/python -m clustermq.devtools.bench.run --scale $(BENCH_SCALE) --out bench-results --doc docs/benchmarks.md --readme README.md

demo: setup
	$(BIN)/clustermq demo

clean:
	rm -rf $(VENV) .cache .pytest_cache
