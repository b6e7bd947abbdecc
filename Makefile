# Two commands for a fresh clone: `make run` (train, evaluate, index and publish on the bundled data) and
# `make test`. Both create .venv and install the pinned dependencies first (`make setup`).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: setup run test lint bench bench-smoke clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,serve]"
	touch $(STAMP)

run: setup
	$(PY) -m pipelines.train --config=configs/two_tower.py --output_dir=artifacts

test: setup
	$(PY) -m pytest

lint: setup
	$(PY) -m ruff check retrieval pipelines configs tests benchmarks

bench: setup
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) -m benchmarks.run_all

clean:
	rm -rf artifacts build *.egg-info
