"""Evaluation of a run directory: what the training pipeline and ``pipelines.evaluate`` call.

:func:`evaluate_run` reads the run (see ``loading``), indexes train and test against the run's catalogue
(``protocols.prepare``), encodes the test users from their training histories, calls ``evaluator.evaluate`` for the
model, the baselines (tuned first on the run's holdout, ``baseline_tuning``, then refitted on all training data),
an optional approximate index and an optional second run, adds the protocol and the counts, and writes
``metrics.json``, ``report.md`` and ``recall_at_k.png`` into the run (atomically, ``report.write``). Settings not
passed come from the run's ``config.json`` (``eval.ks``, ``eval.exclude_train``, ``eval.baselines``,
``eval.bootstrap``, ``eval.baseline_budget_s``, ..., ``seed``), else from the defaults below.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from absl import logging

from retrieval import artifacts
from retrieval.config_keys import Settled
from retrieval.data import catalogue as catalogue_lib
from retrieval.data import content, features
from retrieval.data.config import DATA
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.evaluation import baseline_tuning, cold_items, evaluator, loading, protocols, ranking, report
from retrieval.evaluation import baselines as baselines_lib
from retrieval.evaluation.config import EVAL
from retrieval.settings import TOP

# Baselines fitted on the whole user x item matrix: a user sample cannot fit them.
TUNING_RECORD = "baseline_tuning.json"  # in the run directory: each tuned baseline's result and the settings it used
WHOLE_MATRIX_BASELINES = tuple(name for name, baseline in baselines_lib.BASELINES.items() if baseline.whole_matrix)


def _settings(run_dir, **given) -> dict:
    # The run's config.json, its declared defaults where it leaves a key out; then what the caller gives.
    config = Settled(loading.read_json_if_present(artifacts.RunPaths(run_dir).config), (TOP, EVAL))
    settings = {name: config[name] for name in config if name.startswith("eval.")}
    settings = {name.removeprefix("eval."): value for name, value in settings.items()} | {"seed": config["seed"]}
    settings.update({key: value for key, value in given.items() if value is not None})
    if not settings["ks"] or min(settings["ks"]) < 1:
        raise InputError(f"ks must be positive integers, got {settings['ks']}", field="ks")
    unknown = sorted(set(settings["baselines"]) - set(baselines_lib.NAMES))
    if unknown:
        raise InputError(f"unknown baselines {unknown}; known: {list(baselines_lib.NAMES)}", field="baselines")
    return settings


def user_sample(path, max_users: int, seed: int) -> Optional[np.ndarray]:
    """A seeded uniform sample of ``max_users`` users of the run's table at ``path`` (test or validation data;
    None: all of them), read from the user column only, so that a table larger than memory is never loaded whole."""
    if max_users <= 0:
        return None
    users = pc.unique(ds.dataset(str(path), format="parquet").to_table(columns=["user_id"]).column("user_id"))
    if len(users) <= max_users:
        return None
    chosen = np.sort(np.random.default_rng(seed).choice(len(users), max_users, replace=False))
    return np.asarray(users.take(pa.array(chosen)).to_numpy(zero_copy_only=False), dtype=object).astype(str)


def _item_counts(train_path, catalogue: np.ndarray) -> np.ndarray:
    """[V] training interactions per vocabulary index (repeats counted, as ``protocols.prepare``), from a scan of the
    item column in record batches."""
    counts = np.zeros(len(catalogue), np.int64)
    rows = pd.Index(catalogue)
    for batch in ds.dataset(str(train_path), format="parquet").to_batches(columns=["item_id"]):
        found = rows.get_indexer(batch.column(0).cast(pa.string()).to_numpy(zero_copy_only=False))
        counts += np.bincount(found[found >= 0], minlength=len(catalogue))
    return counts


def _content(paths: artifacts.RunPaths, catalogue: np.ndarray):
    """Content vectors of the catalogue (``retrieval.data.content``) from the run's item feature table, coded by
    its saved specs; None (logged) when the run has no specs or the table is gone."""
    config = Settled(loading.read_json_if_present(paths.config), (DATA,))
    path = config["data.item_features_path"]
    if not path or not paths.item_features.exists() or not Path(path).exists():
        logging.warning("cold items: no content baseline (item feature table or specs not found)")
        return None
    id_column, specs = features.load_specs(paths.item_features)
    vocabulary = Vocabulary(catalogue, np.zeros(len(catalogue), np.int64))
    arrays = catalogue_lib.feature_arrays(path, id_column, config["data.item_features"], "data.item_features",
                                          vocabulary, specs)
    return content.content_vectors(arrays)


def _other_run(other_dir, data: protocols.EvalData, rows: np.ndarray, train) -> ranking.Scorer:
    """Scorer of another run on this evaluation's users and catalogue (items it lacks are never recommended)."""
    other = loading.load_run_model(other_dir)
    item_vectors, unavailable = other.aligned_to(data.item_ids[NUM_RESERVED:])
    user_vectors = np.zeros((len(data.user_ids), item_vectors.shape[1]), np.float32)
    user_vectors[rows] = other.user_vectors(data.user_ids[rows], train)
    logging.info("comparing with run %s (%d catalogue items it lacks)", other.run_id, len(unavailable))
    return ranking.dot_scorer(user_vectors, item_vectors, unavailable)


def _baseline_defaults(settings: dict) -> dict[str, dict]:
    """The baselines' defaults the run's ``eval`` settings give (``baselines.config_defaults``)."""
    return baselines_lib.config_defaults(settings["ease_lambda"], settings["ease_max_items"])


def _tune_baselines(paths: artifacts.RunPaths, catalogue: np.ndarray, train: Optional[pd.DataFrame],
                    settings: dict, names: Optional[Sequence[str]] = None) -> tuple[dict, str]:
    """The tunable baselines of ``settings`` (or ``names``) tuned on the run's holdout (``baseline_tuning``), and the
    protocol line ("" when no baseline is tunable). Each baseline is tuned once per run and setting: the results are
    kept in the run's :data:`TUNING_RECORD`, so that the teacher of training (``retrieval.jobs.teacher``) and the
    evaluation read the same tuning, and a resumed evaluation does not tune again."""
    names = [name for name in (settings["baselines"] if names is None else names)
             if baselines_lib.BASELINES[name].tunable]
    if not names:
        return {}, ""
    holdout = baseline_tuning.run_holdout(paths.root, catalogue, train)
    if holdout is None:
        logging.warning("baselines not tuned: the run has no validation data (no automatic holdout, no validation "
                        "file); %s keep their defaults", ", ".join(names))
    key = {name: settings[name] for name in ("ks", "ease_lambda", "ease_max_items", "baseline_budget_s",
                                             "baseline_tuning_users", "seed", "baseline_memory_mb", "exclude_train")}
    key["items"] = len(catalogue)
    record_path = paths.root / TUNING_RECORD
    record = artifacts.read_json(record_path) if record_path.exists() else {}
    tuned = {name: baseline_tuning.Tuned(**record[name]["tuned"]) for name in names
             if name in record and record[name]["key"] == json.loads(json.dumps(key, default=str))}
    missing = [name for name in names if name not in tuned]
    tuned.update(baseline_tuning.tune_all(
        missing, holdout, report.headline_k(settings["ks"]), defaults=_baseline_defaults(settings),
        budget_s=settings["baseline_budget_s"], max_users=settings["baseline_tuning_users"], seed=settings["seed"],
        memory_mb=settings["baseline_memory_mb"], exclude_train=settings["exclude_train"]))
    if holdout is not None and missing:
        record.update({name: {"key": key, "tuned": dataclasses.asdict(tuned[name])} for name in missing
                       if name in tuned})
        artifacts.write_json(record_path, record)
    tuned = {name: tuned[name] for name in names if name in tuned}
    return tuned, baseline_tuning.protocol(holdout, tuned, settings["baseline_budget_s"])


def tuned_baseline(run_dir, name: str, catalogue: np.ndarray) -> Optional[baseline_tuning.Tuned]:
    """Baseline ``name`` tuned on the run's holdout with the run's ``eval`` settings (and kept for the evaluation,
    see :func:`_tune_baselines`); None when it cannot be (no holdout, not tunable)."""
    tuned, _ = _tune_baselines(artifacts.RunPaths(run_dir), catalogue, None, _settings(run_dir), [name])
    return tuned.get(name)


def tuned_params(run_dir, name: str, catalogue: np.ndarray) -> dict:
    """The parameters of baseline ``name`` as the run's evaluation uses them (:func:`tuned_baseline`), else its
    defaults."""
    tuned = tuned_baseline(run_dir, name, catalogue)
    return dict(tuned.params) if tuned is not None else dict(baselines_lib.BASELINES[name].defaults)


def tune_baselines(run_dir, catalogue: np.ndarray) -> tuple[list[str], dict]:
    """Tunes the run's baselines now (kept for the evaluation, see :func:`_tune_baselines`): the names the
    evaluation will fit (``eval.baselines`` within ``eval.baseline_memory_mb``) and the tuned parameters by name."""
    settings = _settings(run_dir)
    tuned, _ = _tune_baselines(artifacts.RunPaths(run_dir), catalogue, None, settings)
    params = {name: dict(result.params) for name, result in tuned.items()}
    names = [name for name in settings["baselines"] if baselines_lib.skip_reason(
        name, len(catalogue), settings["baseline_memory_mb"],
        baselines_lib.params_of(name, params.get(name), _baseline_defaults(settings))) is None]
    return names, params


def evaluate_run(run_dir, ks: Optional[Sequence[int]] = None, test_path: Optional[str] = None, *,
                 exclude_train: Optional[bool] = None, baselines: Optional[Sequence[str]] = None,
                 n_bootstrap: Optional[int] = None, seed: Optional[int] = None, ann_index_path: Optional[str] = None,
                 ann_index_offset: int = 0, compare_run_dir: Optional[str] = None, write: bool = True,
                 output_dir: Optional[str] = None, head_share: float = 0.8,
                 max_block_bytes: int = 256 << 20, max_users: Optional[int] = None,
                 baseline_budget_s: Optional[float] = None) -> dict:
    """Evaluates the run in ``run_dir`` on its test split (or ``test_path``); returns the flat metrics.

    Args:
      run_dir: a run directory (``RunPaths`` layout) with an exported model.
      ks: cut-offs (default: the run's ``eval.ks``, else 10, 20, 50, 100).
      test_path: explicit test file (any format ``retrieval.data.readers`` reads) instead of ``data/test.parquet``.
      exclude_train: remove each user's training items from her ranking (default true).
      baselines: baseline names computed in the same run (default: all of ``baselines.NAMES``).
      n_bootstrap: resamples for 95% intervals and paired tests (0: none).
      seed: seed of the bootstrap and of the random baseline (default: the run's seed).
      ann_index_path: a FAISS index file, e.g. the run's ``index/index.faiss``; reports its metrics and its recall
        against exact search under ``ann/``.
      ann_index_offset: added to the index's ids to get vocabulary indices: 0 for the run's own index (it stores
        vocabulary indices), 2 for a plain index over the rows of ``item_embeddings.parquet``.
      compare_run_dir: another run, evaluated on the same users and catalogue, reported under ``compare/`` and
        compared per user with this one under ``paired/compare/``.
      write: write metrics.json, report.md and recall_at_k.png.
      output_dir: where to write them (default: the run directory; the quality gate of later runs compares with the
        published run's metrics.json, so evaluate a published run on other data into another directory).
      head_share: share of training interactions in the popularity head (tail metrics).
      max_block_bytes: memory bound of one block of scores.
      max_users: evaluate a seeded uniform sample of this many test users (default: the run's ``eval.max_users``;
        0: all). Only the sampled users' rows of the train and test tables are read (filtered scans), so the memory
        depends on the sample, not on the log; popularity still counts the whole training table, and the item-item
        baselines (item-kNN, RP3beta, EASE^R), which need the whole matrix, are skipped. Intervals are over the
        sample.
      baseline_budget_s: seconds each tunable baseline may spend on its tuning (default: the run's
        ``eval.baseline_budget_s``; 0: no tuning, the defaults). The holdout and the grid: ``baseline_tuning``.
    """
    paths = artifacts.RunPaths(run_dir)
    settings = _settings(run_dir, ks=ks, exclude_train=exclude_train, baselines=baselines, bootstrap=n_bootstrap,
                         seed=seed, max_users=max_users, baseline_budget_s=baseline_budget_s)
    sample = None if test_path else user_sample(paths.test_data, settings["max_users"], settings["seed"])
    if sample is None:
        train = loading.read_interactions(paths.train_data, "training data")
        test = loading.read_interactions(test_path or paths.test_data, "test data")
    else:
        train = loading.read_users_interactions(paths.train_data, sample, "training data")
        test = loading.read_users_interactions(paths.test_data, sample, "test data")
        skipped = [name for name in settings["baselines"] if name in WHOLE_MATRIX_BASELINES]
        settings["baselines"] = tuple(name for name in settings["baselines"] if name not in WHOLE_MATRIX_BASELINES)
        logging.info("evaluating a sample of %d test users (eval.max_users)%s", len(sample),
                     f"; {', '.join(skipped)} skipped: fitted on the whole matrix" if skipped else "")
    split, description = loading.protocol_of(run_dir, test_path)
    model = loading.load_run_model(run_dir)
    catalogue = protocols.prepare(train, test, model.item_ids)
    # The headline ranks the warm items (those with training interactions); cold ones are reported apart.
    warm = np.concatenate([np.ones(NUM_RESERVED, bool), model.warm])
    data = protocols.prepare(train, test, model.item_ids[model.warm]) if not model.warm.all() else catalogue
    if sample is not None:
        data = dataclasses.replace(data, popularity=_item_counts(paths.train_data, data.item_ids))
    rows = np.flatnonzero(catalogue.test.lengths > 0)  # only users with test items are ever scored
    user_vectors = np.zeros((len(data.user_ids), model.item_vectors.shape[1]), np.float32)
    user_vectors[rows] = model.user_vectors(data.user_ids[rows], train)
    others = {"compare": _other_run(compare_run_dir, data, rows, train)} if compare_run_dir else None
    ann_index = None
    if ann_index_path and not model.warm.all():
        logging.warning("ann/: not measured on a catalogue with cold items (the index holds catalogue indices, the "
                        "headline ranks warm items)")
    elif ann_index_path:
        import faiss  # only needed for this option

        ann_index = faiss.read_index(str(ann_index_path))
    tuned, tuning = _tune_baselines(paths, data.item_ids, train if sample is None else None, settings)
    result = evaluator.evaluate(
        user_vectors, model.item_vectors[warm], data.train, data.test, settings["ks"], popularity=data.popularity,
        exclude_train=settings["exclude_train"], baselines=settings["baselines"], others=others,
        n_bootstrap=settings["bootstrap"], seed=settings["seed"], ann_index=ann_index,
        ann_index_offset=ann_index_offset, head_share=head_share,
        max_block_bytes=max_block_bytes, baseline_defaults=_baseline_defaults(settings),
        baseline_memory_mb=settings["baseline_memory_mb"],
        baseline_params={name: t.params for name, t in tuned.items()})
    result.update(data.counts)
    for t in tuned.values():
        result.update(t.metrics())
    if tuning:
        result["protocol/baseline_tuning"] = tuning
    if not model.warm.all():
        result.update(cold_items.evaluate(user_vectors, model.item_vectors, warm, catalogue.train, catalogue.test,
                                          _content(paths, catalogue.item_ids), settings["ks"],
                                          exclude_train=settings["exclude_train"], n_bootstrap=settings["bootstrap"],
                                          seed=settings["seed"]))
    if sample is not None:
        result["protocol/skipped_baselines"] += skipped
        result["protocol/user_sample"] = f"{len(sample)} test users, uniform, seed {settings['seed']} (eval.max_users)"
    result.update({"protocol": description, "protocol/split": split, "protocol/metric": model.metric,
                   "run_id": model.run_id})
    if compare_run_dir:
        result["protocol/compare_run"] = str(compare_run_dir)
    if write:
        report.write(output_dir or paths.root, result)
    return result
