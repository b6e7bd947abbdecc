"""Probe (issue 26): does an inference-time popularity prior close the two-tower's NDCG@20 gap to EASE^R?

Hypothesis under test: the cosine model at temperature T (logits bounded by 1/T) under-weights popular items at the
head of its list, which EASE^R captures. The prior re-ranks with

    score(u, i) = s(u, i) / T + beta * log(1 + count_i)

where ``s`` is the score the library ranks with (the cosine of the exported, L2-normalised vectors), ``s / T`` the
training logit before the static log-Q correction, and ``count_i`` the item's count in the training data of that
evaluation (+1 smoothing): beta = 1 puts back the whole unigram prior that log-Q took out. It is applied exactly as
one more vector dimension, user ``[u / T, 1]``, item ``[v, beta * log(1 + count)]``, so the library's evaluator ranks
it unchanged (full corpus, exact, training items excluded, recall denominator |test items|, NDCG@20).

One run of the one command exactly as ``bench_quality`` makes it (``_data``, ``_config``, seed, ``TrainingJob``): the
prepare stage holds out ``train.validation_fraction`` of the training file, training early-stops on it, refits on all
of it, then the test part is evaluated. The holdout-tuned model (the weights early stopping restored) is then read
back from the tuning checkpoint (``retrieval.jobs.tuning.tuned_model``). Two evaluations are captured, by recording
the arguments of ``retrieval.evaluation.evaluator.evaluate`` while the library's own code calls it:

- validation: the pipeline's early-stopping metric (``tuning.validation_fn``, tuning model, training data minus
  the holdout -> the holdout);
- test: ``evaluation.runs.evaluate_run`` of the refit run (training file -> test).

For every beta the captured vectors and matrices are re-evaluated with ``evaluator.evaluate``; beta is chosen on
validation NDCG@20 only. At beta = 0 and at the chosen beta the test evaluation also runs EASE^R (the pipeline's
``eval.ease_lambda`` and ``eval.ease_max_items``) with the evaluator's paired per-user bootstrap (1,000 resamples,
the run's seed), and the beta = 0 model as another system, so ``paired/ease`` is the prior model minus EASE^R on the
same users.

    python -m benchmarks.experiments.probe_popularity_prior --dataset=ml-1m --seed=42 [--out=probe.json]

A probe, not a feature: nothing here is in the library (models, export, serving).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Callable
from unittest import mock

import numpy as np
from absl import logging

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from benchmarks import bench_quality
from retrieval import artifacts
from retrieval.data import handoff
from retrieval.errors import GateError
from retrieval.evaluation import baselines, evaluator, ranking, runs
from retrieval.jobs import identity, tuning
from retrieval.jobs.job import TrainingJob

BETAS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
K = 20
DATASETS = ("ml-1m", "lastfm", "amazon-beauty-sets")


def _captured(call: Callable[[], object]) -> dict:
    """Runs ``call`` with ``evaluator.evaluate`` recording the arguments the library passes it (then evaluating)."""
    original, seen = evaluator.evaluate, {}

    def recording(user_vectors, item_vectors, train, test, ks=evaluator.DEFAULT_KS, **kwargs):
        seen.update(user_vectors=user_vectors, item_vectors=item_vectors, train=train, test=test,
                    popularity=kwargs.get("popularity"))
        return original(user_vectors, item_vectors, train, test, ks, **kwargs)

    with mock.patch.object(evaluator, "evaluate", recording):
        call()
    return seen


def _prior_vectors(seen: dict, beta: float, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """User ``[u / T, 1]`` and item ``[v, beta * log(1 + count)]``: their inner product is the prior's score."""
    counts = np.asarray(seen["popularity"], np.float64)
    users = np.hstack([seen["user_vectors"] / temperature, np.ones((len(seen["user_vectors"]), 1), np.float32)])
    items = np.hstack([seen["item_vectors"], (beta * np.log1p(counts))[:, None].astype(np.float32)])
    return users.astype(np.float32), items


def _evaluate(seen: dict, beta: float, temperature: float, **kwargs) -> dict:
    users, items = _prior_vectors(seen, beta, temperature)
    return evaluator.evaluate(users, items, seen["train"], seen["test"], (K,), popularity=seen["popularity"],
                              **{"baselines": (), "n_bootstrap": 0, **kwargs})


def _norms(seen: dict) -> str:
    rows = np.flatnonzero(np.abs(seen["user_vectors"]).sum(axis=1) > 0)
    users, items = (np.linalg.norm(seen["user_vectors"][rows], axis=1),
                    np.linalg.norm(seen["item_vectors"][2:], axis=1))
    return f"user norms {users.min():.3f}-{users.max():.3f}, item norms {items.min():.3f}-{items.max():.3f}"


def probe(dataset: str, seed: int, tmp: Path, betas=BETAS, epochs: int = 0) -> dict:
    """The one command on ``dataset`` with ``seed``, then the prior's grid on validation and test (``epochs``: a
    shorter cap than the config's, for a quick check of the probe itself; 0 keeps the config's)."""
    settings, protocol = bench_quality._data(dataset, tmp, smoke=False)
    config = bench_quality._config("two_tower", {**settings, "seed": seed, "eval.baselines": ("ease",),
                                                 **({"train.epochs": epochs} if epochs else {})})
    temperature = float(config.model.temperature)
    job = TrainingJob(config, str(tmp / "runs"), run_id="run")
    start = time.perf_counter()
    try:
        job.run()
    except GateError:
        if identity.validation_scored(config, {}) is None:
            raise
    run_s = time.perf_counter() - start
    metrics = artifacts.read_json(job.paths.metrics)
    run = tuning.TrainingRun(config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    item_vocab, user_vocab = run.vocabularies()
    validation = _captured(tuning.validation_fn(run, tuning.tuned_model(run), item_vocab, user_vocab, tuning=True))
    test = _captured(lambda: runs.evaluate_run(job.paths.root, write=False, baselines=(), n_bootstrap=0))
    logging.info("validation: %s; test: %s", _norms(validation), _norms(test))
    grid = []
    for beta in betas:
        v, t = _evaluate(validation, beta, temperature), _evaluate(test, beta, temperature)
        grid.append({"beta": beta, "valid_recall": v[f"recall@{K}"], "valid_ndcg": v[f"ndcg@{K}"],
                     "test_recall": t[f"recall@{K}"], "test_ndcg": t[f"ndcg@{K}"]})
        print(f"{dataset} seed {seed} beta {beta:<5} valid recall@20 {grid[-1]['valid_recall']:.4f} "
              f"NDCG@20 {grid[-1]['valid_ndcg']:.4f} | test recall@20 {grid[-1]['test_recall']:.4f} "
              f"NDCG@20 {grid[-1]['test_ndcg']:.4f}", flush=True)
    chosen = max(grid, key=lambda row: row["valid_ndcg"])["beta"]
    by_recall = max(grid, key=lambda row: row["valid_recall"])["beta"]
    plain = ranking.dot_scorer(*_prior_vectors(test, 0.0, temperature))
    paired = {}
    for beta in sorted({0.0, chosen}):
        result = _evaluate(test, beta, temperature, baselines=("ease",), others={"beta0": plain},
                           n_bootstrap=config.eval.bootstrap, seed=seed,
                           baseline_defaults=baselines.config_defaults(config.eval.ease_lambda,
                                                                       config.eval.ease_max_items),
                           baseline_memory_mb=config.eval.baseline_memory_mb)
        paired[str(beta)] = {key: value for key, value in result.items()
                             if key.startswith(("paired/", "baseline/ease/")) or key in (f"recall@{K}", f"ndcg@{K}")}
    out = {"dataset": dataset, "seed": seed, "protocol": protocol, "temperature": temperature, "run_s": round(run_s),
           "holdout_best_epoch": ((job.stages.summary("train") or {}).get("tuning") or {}).get("best_epoch"),
           "pipeline_test": {key: metrics.get(key) for key in (f"recall@{K}", f"ndcg@{K}", f"baseline/ease/recall@{K}",
                                                               f"baseline/ease/ndcg@{K}",
                                                               f"paired/ease/ndcg@{K}_diff")},
           "grid": grid, "chosen_beta_by_valid_ndcg": chosen, "best_beta_by_valid_recall": by_recall,
           "test_with_ease": paired, "norms": {"validation": _norms(validation), "test": _norms(test)}}
    for beta, result in paired.items():
        print(f"{dataset} seed {seed} test beta {beta}: recall@20 {result[f'recall@{K}']:.4f} NDCG@20 "
              f"{result[f'ndcg@{K}']:.4f}; EASE^R {result[f'baseline/ease/recall@{K}']:.4f} / "
              f"{result[f'baseline/ease/ndcg@{K}']:.4f}; minus EASE^R NDCG@20 {bench_quality._paired(result, 'ease', f'ndcg@{K}')}"
              f", recall@20 {bench_quality._paired(result, 'ease', f'recall@{K}')}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ml-1m", choices=DATASETS)
    parser.add_argument("--seed", type=int, default=bench_quality.FIRST_SEED)
    parser.add_argument("--epochs", type=int, default=0, help="cap training epochs (a quick check; 0: the config's)")
    parser.add_argument("--out", default="", help="also write the result as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = probe(args.dataset, args.seed, Path(tmp), epochs=args.epochs)
    text = json.dumps(result, indent=1, default=float)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
