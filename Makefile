# Two commands for a fresh clone: `make run` (train, evaluate, index and publish on the bundled data) and
# `make test`. Both create .venv and install the dependencies first (`make setup`), every package at the version
# pinned in constraints.txt (`make constraints` rewrites it from .venv after a dependency change in setup.cfg).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_USE_LEGACY_KERAS := 1

# The slowest test files (whole pipelines in subprocesses, benchmark smoke runs, multi-process serving and training,
# measured with `pytest --durations`): `make test-fast` leaves them out for the inner loop; `make test` runs all.
SLOW_TESTS := tests/benchmarks $(addprefix tests/,jobs/test_pipeline_job.py \
	jobs/test_pipeline_lineage_job.py jobs/test_pipeline_sets.py jobs/test_pipeline_tuning.py \
	jobs/test_pipeline_streaming.py pipelines/test_pipelines_eval.py test_distributed.py \
	sampling/test_sampling_distributed.py test_parameter_server.py serving/test_serving_workers.py)

.PHONY: setup run test test-fast lint bench constraints clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,serve]"
	touch $(STAMP)

run: setup
	$(PY) -m pipelines.train --config=configs/two_tower.py --output_dir=artifacts

# pytest-xdist: TEST_WORKERS processes (one per core here), each test file kept on one worker (its module-scoped
# fixtures, e.g. models built once, are built once).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) $(addprefix --ignore=,$(SLOW_TESTS))

lint: setup
	$(PY) -m ruff check retrieval pipelines configs tests benchmarks deploy

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
