"""Exports a run's user tower as a numbered version of a TF Serving / KServe model base path.

    python -m pipelines.export --run_dir=artifacts/two_tower --base_dir=/models --name=user_tower [--version=N]

writes ``/models/user_tower/<N>/`` (``saved_model.pb``, ``variables/``, ``assets.extra/run.json`` naming the run),
copied under a temporary name and renamed when complete. ``--run_dir`` may be a run or a model directory (its
``latest`` run is exported); ``--version`` defaults to one more than the highest version there. Point TF Serving at
``--model_base_path=/models/user_tower`` (or a KServe TensorFlow predictor's ``storageUri`` at that folder): it
serves the highest version and moves to a new one when it appears. Prints the version directory. Exit codes: see
``retrieval.cli`` (2 for a bad run, name or an existing version).
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from retrieval import cli
from retrieval.errors import InputError

_RUN_DIR = flags.DEFINE_string("run_dir", None, "A run directory, or a model directory whose 'latest' names the run.")
_BASE_DIR = flags.DEFINE_string("base_dir", None, "Folder holding one model base path per model name.")
_NAME = flags.DEFINE_string("name", "user_tower", "Model name: the folder under --base_dir (TF Serving's model name).")
_VERSION = flags.DEFINE_integer("version", 0, "Version number to write (0: one more than the highest there).")


def main(argv: Sequence[str]) -> None:
    cli.check_arguments(argv, _RUN_DIR, _BASE_DIR)
    if _VERSION.value < 0:
        raise InputError(f"--version must be >= 0, got {_VERSION.value}", field="version")
    from retrieval.export import tf_serving_dir  # TensorFlow loads after the flags are checked
    from retrieval.serving.generator import resolve_run_dir

    print(tf_serving_dir(resolve_run_dir(_RUN_DIR.value), _BASE_DIR.value, _NAME.value, _VERSION.value or None))


if __name__ == "__main__":
    cli.run(main)
