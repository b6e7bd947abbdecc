"""Evaluates a trained run: full-corpus exact ranking, metrics with 95% intervals, baselines, report.

    python -m pipelines.evaluate --run_dir=artifacts/two_tower [--test_path=test.csv] [--ks=10,20,50,100]

Writes ``metrics.json``, ``report.md`` and ``recall_at_k.png`` into the run directory, or ``--output_dir``
(atomically), and prints the headline numbers (and one line when the model trails the best baseline). The tunable
baselines are tuned on the run's holdout first (``retrieval.evaluation.baseline_tuning``). Settings not given on the
command line come from the run's ``config.json``. Exit codes: see ``retrieval.cli`` (2 for bad input).
"""

from __future__ import annotations

from typing import Optional, Sequence

from absl import flags

from retrieval import cli, locations
from retrieval.errors import InputError
from retrieval.evaluation import baselines

_RUN = cli.RunDirFlags("evaluate (the report is written into its run directory unless --output_dir says otherwise)")
_TEST_PATH = flags.DEFINE_string("test_path", None, "Explicit test file (csv, tsv, parquet, movielens or user_items "
                                 "with canonical columns) instead of the run's data/test.parquet.")
_KS = flags.DEFINE_list("ks", None, "Cut-offs k, comma separated, e.g. 10,20,50,100. Default: the run's eval.ks.")
_BASELINES = flags.DEFINE_list("baselines", None, "Baselines computed in the same run, comma separated, among "
                               f"{', '.join(baselines.BASELINES)}; 'none' for none. Default: the run's eval.baselines.")
_BOOTSTRAP = flags.DEFINE_integer("bootstrap", None, "Bootstrap resamples over users for 95% intervals and paired "
                                  "tests; 0 disables them. Default: the run's eval.bootstrap, else 1000.")
_SEED = flags.DEFINE_integer("seed", None, "Seed of the bootstrap and the random baseline. Default: the run's seed.")
_MAX_USERS = flags.DEFINE_integer("max_users", None, "Evaluate a seeded uniform sample of this many test users, "
                                  "reading only their rows (logs larger than memory; item_knn, rp3beta and ease "
                                  "are then skipped); 0: all. Default: the run's eval.max_users, else 0.",
                                  lower_bound=0)
_BUDGET = flags.DEFINE_float("baseline_budget_s", None, "Seconds each tunable baseline (item_knn, rp3beta, ease) may "
                             "spend on its tuning on the run's holdout; 0: no tuning (defaults). Default: the run's "
                             "eval.baseline_budget_s, else 300.", lower_bound=0)
_INCLUDE_TRAIN = flags.DEFINE_bool("include_train", False, "Let users' training items be recommended (by default "
                                   "they are excluded: the standard 'seen excluded' protocol).")
_ANN_INDEX = flags.DEFINE_string("ann_index", None, "Optional FAISS index file, e.g. <run_dir>/index/index.faiss; "
                                 "also reports its metrics and its recall against exact search (ann/...).")
_ANN_OFFSET = flags.DEFINE_integer("ann_index_offset", 0, "Added to the index's ids to get vocabulary item indices: 0 "
                                   "for the run's own index (it stores vocabulary indices), 2 for a plain index over "
                                   "the rows of item_embeddings.parquet.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write metrics.json, report.md and recall_at_k.png. "
                                  "Default: the run directory. Use another directory when evaluating a published run "
                                  "on other data, so the metrics its quality gate compares against stay unchanged.")
_COMPARE = flags.DEFINE_string("compare_run_dir", None, "Optional second run evaluated on the same users; reports a "
                               "paired comparison (difference, 95% interval, p-value) under paired/compare/.")


def _ints(values: Sequence[str], flag: str) -> list[int]:
    try:
        return [int(v) for v in values]
    except ValueError:
        raise InputError(f"expected integers, got {','.join(values)}", field=flag) from None


def _check_flags(run_dir: str, ks: Optional[list[int]]) -> None:
    """Paths and numbers of the command line, before TensorFlow loads (exit 2 at once on a mistake)."""
    for flag, kind in ((_TEST_PATH, "any"), (_ANN_INDEX, "file"), (_COMPARE, "dir")):
        if flag.value:
            locations.check_input(flag.value, flag.name, kind)
    locations.check_writable_dir(_OUTPUT_DIR.value or run_dir, "output_dir")
    if ks is not None and min(ks) < 1:
        raise InputError(f"every k must be at least 1, got {','.join(map(str, ks))}", field="ks")
    if _BOOTSTRAP.value is not None and _BOOTSTRAP.value < 0:
        raise InputError(f"must be 0 (none) or more resamples, got {_BOOTSTRAP.value}", field="bootstrap")


def main(argv: Sequence[str]) -> None:
    cli.check_arguments(argv, _RUN.run_dir)
    ks = _ints(_KS.value, "ks") if _KS.value else None
    run_dir = str(_RUN.resolve())
    _check_flags(run_dir, ks)
    from retrieval.evaluation import runs  # TensorFlow loads only now: --help and flag errors stay instant
    from retrieval.evaluation.summary import trailing_line

    baselines = _BASELINES.value
    metrics = runs.evaluate_run(
        run_dir, ks=ks, test_path=_TEST_PATH.value,
        exclude_train=False if _INCLUDE_TRAIN.value else None,
        baselines=[] if baselines == ["none"] else baselines, n_bootstrap=_BOOTSTRAP.value, seed=_SEED.value,
        ann_index_path=_ANN_INDEX.value, ann_index_offset=_ANN_OFFSET.value, compare_run_dir=_COMPARE.value,
        output_dir=_OUTPUT_DIR.value, max_users=_MAX_USERS.value, baseline_budget_s=_BUDGET.value)
    k = metrics["protocol/ks"][min(1, len(metrics["protocol/ks"]) - 1)]
    print(f"{metrics['protocol']}; {metrics['count/eval_users']} users (+{metrics['count/cold_start_users']} cold "
          f"start): recall@{k}={metrics.get(f'recall@{k}', float('nan')):.4f} "
          f"ndcg@{k}={metrics.get(f'ndcg@{k}', float('nan')):.4f}; "
          f"report: {_OUTPUT_DIR.value or run_dir}/report.md")
    trailing = trailing_line(metrics)
    if trailing:
        print(trailing)


if __name__ == "__main__":
    cli.run(main)
