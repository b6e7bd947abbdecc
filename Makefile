# Two commands for a fresh clone: `make run` (train, evaluate, index and publish on the bundled data) and
# `make test`. Both create .venv and install the dependencies first (`make setup`), every package at the version
# pinned in constraints.txt (`make constraints` rewrites it from .venv after a dependency change in setup.cfg).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_USE_LEGACY_KERAS := 1

.PHONY: setup run test test-fast lint bench constraints clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,serve]"
	touch $(STAMP)

# The bundled demo without the run's 15-minute budget (train.time_budget_s): its table is then the same on a slow
# machine (or a loaded one, as in the test suite), where the budget would plan fewer epochs.
run: setup
	$(PY) -m pipelines.train --config=configs/two_tower.py --config.train.time_budget_s=0 --output_dir=artifacts

# pytest-xdist: TEST_WORKERS processes (one per core here), each test file kept on one worker (its module-scoped
# fixtures, e.g. models built once, are built once).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(PYTEST)

# The inner loop: the suite without the files marked slow in tests/conftest.py (whole pipelines in
# subprocesses, multi-process serving and training, benchmark smoke runs).
test-fast: setup
	$(PYTEST) -m "not slow"

lint: setup
	$(PY) -m ruff check retrieval pipelines configs tests benchmarks deploy tools

bench: setup
	$(PY) -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(PY) -m benchmarks.run_all

constraints:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e ".[dev,serve]"
	{ echo '# Every package of a tested install, pinned: pip install -c constraints.txt -e ".[dev,serve]" (make setup).'; \
	  echo '# Regenerate after changing dependencies in setup.cfg: make constraints (pip freeze of .venv, Python 3.11, Linux x86_64).'; \
	  $(PY) -m pip freeze --exclude-editable; } > constraints.txt

clean:
	rm -rf artifacts build *.egg-info
