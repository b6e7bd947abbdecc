"""Scheduled training job: raw interaction log -> trained, evaluated, indexed, gated and published run.

    python -m pipelines.train --config=configs/two_tower.py [--config.train.epochs=5 ...] \\
        [--output_dir=artifacts] [--run_id=20260101] [--force]

Runs go to <output_dir>/<config.name>/<run_id>/; <output_dir>/<config.name>/latest points at the published one.
Rerunning a run id resumes it (finished stages are skipped, training resumes from its last intact checkpoint) if it
was started with the same configuration and input files; otherwise it exits 2 (use a new run id or --force).
Everything is validated before any work and before TensorFlow loads (``retrieval.jobs.config_checks``: every config
key, the run id, the output directory, the input files and their columns, the gate's metric names), so a mistake
answers in seconds.
Exit codes: 0 published, 1 unexpected failure, 2 bad input or config, 3 quality gate refused (latest untouched),
4 another process holds this run.
"""

from absl import flags, logging

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from retrieval import cli
from retrieval.jobs import config_checks, locations

_CONFIG = cli.define_config_file(
    "config", "configs/two_tower.py",
    "Pipeline config file (configs/two_tower.py, configs/youtube_dnn.py, configs/item2vec.py); override any key "
    "with --config.<key>=<value>, e.g. --config.data.train_path=log.parquet.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "artifacts", "Root of the model directories: runs are written to "
                                  "<output_dir>/<config.name>/<run_id>/.")
_RUN_ID = flags.DEFINE_string("run_id", None, "Run id (default: the UTC time, YYYYmmddTHHMMSS): 1-128 letters, "
                              "digits, '.', '_' or '-', not 'latest'. Reusing an id resumes that run.")
_FORCE = flags.DEFINE_bool("force", False, "Redo every stage of an existing run id instead of resuming it.")


def main(argv):
    cli.check_arguments(argv)
    run_id = _RUN_ID.value or locations.new_run_id()
    config_checks.validate_job(_CONFIG.value, _OUTPUT_DIR.value, run_id)
    from retrieval.jobs.job import TrainingJob  # TensorFlow loads only now: every check above answers in seconds

    job = TrainingJob(_CONFIG.value, _OUTPUT_DIR.value, run_id, force=_FORCE.value)
    print(f"run directory: {job.paths.root}", flush=True)  # first, so a scheduler's alert can name a failed run
    outcome = job.run()
    logging.info("published %s", outcome.run_dir)
    published = job.stages.summary("publish") or {}
    links = (["latest"] if published.get("production", True) else []) + [published.get("link")]
    for link in filter(None, links):  # latest only with a run of production's lineage (docs/operations.md)
        print(f"published: {job.model_dir.root / link} -> {job.run_id}")
    report = job.paths.report
    if report.exists():
        print(report.read_text())


if __name__ == "__main__":
    cli.run(main)
