"""Suite-wide collection order and the ``slow`` marker.

``make test`` runs the suite on pytest-xdist workers, one test file per worker at a time (``--dist loadfile``), in
collection order. The heaviest files (measured with ``pytest --durations=0``: whole pipelines in subprocesses,
multi-process serving and training, benchmark smoke runs) are collected first, heaviest first, so that no worker is
left with one of them at the end while the others idle. ``SLOW`` files carry the ``slow`` marker, which
``make test-fast`` leaves out for the inner loop (``make test`` runs everything).
"""

from pathlib import Path

import pytest

# Heaviest first (seconds of one sequential run on 2 cores, 2026-11-24).
HEAVIEST = (
    "test_readme.py",  # 420 on the idle box, 2026-12-02 (make run's whole schedule); CI once ran it last, alone
    "jobs/test_refresh.py",  # 105 (kills refreshes at four points)
    "serving/test_serving_reload_memory.py",  # 59
    "jobs/test_pipeline_job.py",  # 51
    "serving/test_serving_http.py",  # 51
    "data/test_data_prepare.py",  # 36
    "test_distributed.py",  # 34
    "benchmarks/test_benchmarks_catalogue.py",  # 23
    "benchmarks/test_benchmarks_scale.py",  # 22
    "benchmarks/test_benchmarks_index.py",  # 21
    "test_parameter_server.py",  # 20
    "test_training.py",  # 17
    "benchmarks/test_benchmarks_objectives.py",  # 16
    "benchmarks/test_benchmarks_training.py",  # 15
    "test_export.py",  # 14
    "pipelines/test_pipelines_eval.py",  # 14
    "jobs/test_pipeline_sets.py",  # 13
    "benchmarks/test_benchmarks_sources.py",  # 12
    "test_parameter_server_faults.py",  # 11
    "jobs/test_pipeline_tuning.py",  # 11
    "jobs/test_catalogue_job.py",
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
