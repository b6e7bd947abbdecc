"""Suite-wide collection order and the ``slow`` marker.

``make test`` runs the suite on pytest-xdist workers, one test file per worker at a time (``--dist loadfile``), in
collection order. The heaviest files (measured with ``pytest --durations=0``: whole pipelines in subprocesses,
multi-process serving and training, benchmark smoke runs) are collected first, heaviest first, so that no worker is
left with one of them at the end while the others idle. ``SLOW`` files carry the ``slow`` marker, which
``make test-fast`` leaves out for the inner loop (``make test`` runs everything).
"""

from pathlib import Path

import pytest

# Heaviest first (seconds of their tests in one `make test` on 2 cores, `--durations=0`, 2026-12-02: 2,173 s of tests
# in 1,116 s of wall time).
HEAVIEST = (
    "test_readme.py",  # 619 (make run's whole schedule; CI once ran it last, alone)
    "jobs/test_pipeline_tuning.py",  # 308
    "jobs/test_pipeline_job.py",  # 122
    "test_training.py",  # 87
    "jobs/test_refresh.py",  # 85 (kills refreshes at four points)
    "serving/test_serving_http.py",  # 81
    "data/test_data_prepare.py",  # 72
    "jobs/test_pipeline_sets.py",  # 62
    "jobs/test_catalogue_job.py",  # 51
    "benchmarks/test_benchmarks_index.py",  # 44
    "jobs/test_pipeline_sequential.py",  # 38
    "models/test_sequence_encoder.py",  # 35
    "benchmarks/test_benchmarks_scale.py",  # 34
    "test_export.py",  # 33
    "models/test_models.py",  # 30
    "test_distributed.py",  # 28
    "pipelines/test_pipelines_eval.py",  # 28
    "test_sparse_optimizers.py",  # 27
    "serving/test_serving_reload_memory.py",  # 26
    "pipelines/test_cli.py",  # 26
    "benchmarks/test_benchmarks_catalogue.py",  # 26
    "jobs/test_pipeline_streaming.py",  # 24
)
SLOW = {
    "serving/test_serving_reload_memory.py", "jobs/test_pipeline_job.py", "jobs/test_pipeline_lineage_job.py",
    "jobs/test_pipeline_sets.py", "jobs/test_pipeline_tuning.py", "jobs/test_pipeline_streaming.py",
    "pipelines/test_pipelines_eval.py", "pipelines/test_first_use.py", "test_readme.py", "test_distributed.py",
    "sampling/test_sampling_distributed.py", "test_parameter_server.py", "serving/test_serving_workers.py",
    "jobs/test_catalogue_job.py", "jobs/test_refresh.py",
}
TESTS = Path(__file__).resolve().parent


def _file_of(item: pytest.Item) -> str:
    return Path(item.fspath).resolve().relative_to(TESTS).as_posix()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(HEAVIEST)}
    names = {item.nodeid: _file_of(item) for item in items}
    for item in items:
        if names[item.nodeid] in SLOW or names[item.nodeid].startswith("benchmarks/"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(names[item.nodeid], len(HEAVIEST)))  # stable: files keep their own order
