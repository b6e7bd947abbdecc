"""The one-off experiments still import after the library moves, and reach the job only through public functions."""

import importlib
import inspect

import pytest


@pytest.mark.parametrize("name", ["probe_popularity_prior", "sweep_sets"])
def test_an_experiment_imports_and_calls_no_private_method_of_the_job(name):
    module = importlib.import_module(f"benchmarks.experiments.{name}")
    source = inspect.getsource(module)
    assert callable(module.main) and "job._" not in source and "(TrainingJob)" not in source
