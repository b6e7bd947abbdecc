"""Scheduled training job: raw interaction log -> trained, evaluated, indexed, gated and published run.

    python -m pipelines.train --config=configs/two_tower.py [--config.train.epochs=5 ...] \\
        [--output_dir=artifacts] [--run_id=20260101] [--force]

Runs go to <output_dir>/<config.name>/<run_id>/; <output_dir>/<config.name>/latest points at the published one.
Rerunning a run id resumes it (finished stages are skipped, training resumes from its last intact checkpoint) if it
was started with the same configuration and input files; otherwise it exits 2 (use a new run id or --force).
Everything is validated before any work and before TensorFlow loads (``retrieval.jobs.config_checks``: every config
key, the run id, the output directory, the input files and their columns, the gate's metric names), so a mistake
answers in seconds; what only the prepared data can tell (nothing to evaluate, an index larger than the catalogue,
ids Item2Vec cannot export) is refused before training, and bad data leaves no run directory behind.
Stdout: ``run directory: ...`` once the data is prepared, the evaluation's headline table, what the gate compared,
and a last line saying what was published where and what ``latest`` names (progress goes to the log on stderr).
Exit codes: 0 published, 1 unexpected failure, 2 bad input or config, 3 quality gate refused (latest untouched),
4 another process holds this run.
"""

import contextlib
import shutil
from pathlib import Path

from absl import flags

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from retrieval import cli, locations
from retrieval.jobs import config_checks

_CONFIG = cli.define_config_file(
    "config", "configs/two_tower.py",
    "Pipeline config file (configs/two_tower.py, configs/youtube_dnn.py, configs/item2vec.py); override any key "
    "with --config.<key>=<value>, e.g. --config.data.train_path=log.parquet.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "artifacts", "Root of the model directories: runs are written to "
                                  "<output_dir>/<config.name>/<run_id>/.")
_RUN_ID = flags.DEFINE_string("run_id", None, "Run id (default: the UTC time, YYYYmmddTHHMMSS): 1-128 letters, "
                              "digits, '.', '_' or '-', not 'latest'. Reusing an id resumes that run.")
_FORCE = flags.DEFINE_bool("force", False, "Redo every stage of an existing run id instead of resuming it.")


def published_line(job) -> str:
    """The last line of a run's stdout: what was published where, and what ``latest`` (what serve, recommend and
    evaluate read by default) names now. A run of another lineage than production's moves only its lineage's link,
    and the line says so with ``cli.LATEST_KEPT`` (``pipelines.scheduled`` alerts on it)."""
    published = job.stages.summary("publish") or {}
    root = job.model_dir.root
    if published.get("production", True):
        return f"published: {root / locations.LATEST} -> {job.run_id} (serve it: --run_dir={root})"
    latest = job.model_dir.latest_run_id()
    return (f"published: {root / published['link']} -> {job.run_id} only; {cli.LATEST_KEPT} {latest} (lineage "
            f"{job.model_dir.production_lineage()}); serve this run with --run_dir={root} "
            f"--lineage={published['lineage']}")


def print_evaluation(job) -> None:
    """The headline table (details in the report file) and what the gate compared, on stdout."""
    from retrieval import artifacts
    from retrieval.evaluation.summary import headline_table

    if job.paths.metrics.exists():
        metrics = artifacts.read_json(job.paths.metrics)
        print(f"\n{headline_table(metrics)}\n\n{metrics['count/eval_users']} test users, 95% bootstrap intervals; "
              f"every metric: {job.paths.report}")
    decision = job.stages.summary("gate")
    if decision and decision.get("checked"):
        print(f"gate {'passed' if decision['passed'] else 'refused'}:", *decision["checked"], sep="\n  ")


def main(argv):
    cli.check_arguments(argv)
    run_id = _RUN_ID.value or locations.new_run_id()
    config_checks.validate_job(_CONFIG.value, _OUTPUT_DIR.value, run_id)
    from retrieval.errors import GateError, InputError
    from retrieval.jobs.job import TrainingJob  # TensorFlow loads only now: every check above answers in seconds

    job = TrainingJob(_CONFIG.value, _OUTPUT_DIR.value, run_id, force=_FORCE.value)
    fresh = not job.paths.root.exists()
    created = [d for d in (job.model_dir.root, Path(_OUTPUT_DIR.value)) if not d.exists()]  # deepest first
    try:  # the run is named once its data proved usable, so a scheduler's alert can name a run that failed later
        job.run(on_prepared=lambda root: print(f"run directory: {root}", flush=True))
    except GateError:
        print_evaluation(job)  # what was refused, then the one error line (exit 3)
        raise
    except InputError:
        if fresh and not job.stages.is_done("train"):  # bad data: no half-made run is left behind
            shutil.rmtree(job.paths.root, ignore_errors=True)
            for directory in created:  # nor the model and output directories it made, if nothing else is in them
                with contextlib.suppress(OSError):
                    directory.rmdir()
        raise
    print_evaluation(job)
    print(published_line(job))


if __name__ == "__main__":
    cli.run(main)
