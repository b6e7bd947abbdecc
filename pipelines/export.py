"""Exports a run's user tower as a numbered version of a TF Serving / KServe model base path.

    python -m pipelines.export --run_dir=artifacts/two_tower --base_dir=/models --name=user_tower [--version=N]

writes ``/models/user_tower/<N>/`` (``saved_model.pb``, ``variables/``, ``assets.extra/run.json`` naming the run),
copied under a temporary name and renamed when complete. ``--run_dir`` takes the forms of every entry point (a run,
a model directory: its ``latest`` run, ``--lineage``). Only a published run is exported (TF Serving moves to a new
version by itself) unless ``--allow_unpublished`` says so. ``--version`` defaults to one more than the highest
version there. Point TF Serving at
``--model_base_path=/models/user_tower`` (or a KServe TensorFlow predictor's ``storageUri`` at that folder): it
serves the highest version and moves to a new one when it appears. Prints the version directory. Exit codes: see
``retrieval.cli`` (2 for a bad run, name or an existing version).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from absl import flags

from retrieval import cli, locations
from retrieval.errors import InputError

PUBLISHED = "published"  # the manifest status of a run the gate passed and publish made live (retrieval.jobs.job)
MAX_VERSION = 2**63 - 1  # TF Serving reads a version folder's name as an int64 (retrieval.export.MAX_VERSION)

_RUN = cli.RunDirFlags("export")
_BASE_DIR = flags.DEFINE_string("base_dir", None, "Folder holding one model base path per model name.")
_NAME = flags.DEFINE_string("name", "user_tower", "Model name: the folder under --base_dir (TF Serving's model name; "
                            f"{locations.NAME_RULE}).")
_VERSION = flags.DEFINE_integer("version", 0, "Version number to write (0: one more than the highest there).",
                                lower_bound=0, upper_bound=MAX_VERSION)
_UNPUBLISHED = flags.DEFINE_bool("allow_unpublished", False, "Also export a run that was never published (the gate "
                                 "refused it, or it did not finish): TF Serving moves to a new version by itself.")


def check_published(run_dir, allow_unpublished: bool) -> None:
    """Refuses a run whose manifest does not say it was published (InputError naming its status), unless allowed."""
    manifest = Path(run_dir) / "manifest.json"
    try:
        status = json.loads(manifest.read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        raise InputError("cannot read the run's manifest.json", path=str(manifest)) from None
    if status != PUBLISHED and not allow_unpublished:
        raise InputError(f"run {Path(run_dir).name} was not published (status {status!r}); export only "
                         f"what the gate passed, or pass --allow_unpublished", field="run_dir")


def main(argv: Sequence[str]) -> None:
    cli.check_arguments(argv, _RUN.run_dir, _BASE_DIR)
    run_dir = _RUN.resolve()
    check_published(run_dir, _UNPUBLISHED.value)
    locations.check_name(_NAME.value, "name")
    locations.check_writable_dir(_BASE_DIR.value, "base_dir")
    locations.check_writable_dir(str(Path(_BASE_DIR.value) / _NAME.value), "name")
    from retrieval.export import tf_serving_dir  # TensorFlow loads after the flags are checked

    print(tf_serving_dir(run_dir, _BASE_DIR.value, _NAME.value, _VERSION.value or None))


if __name__ == "__main__":
    cli.run(main)
