"""The scheduled training job: raw log -> validated data -> model -> evaluation -> index -> gate -> published run.

Stages (each logs what it did, counts and time, and leaves a marker in ``<run>/stages/``; see ``stages``):

==========  ===========================================================================================
prepare     read and validate the log, split, build vocabularies from the training part, write them
train       examples, model, ``training.fit`` with checkpoints (resumes from the last one)
export      user-tower SavedModel and item embeddings (any model type exports the same signature)
evaluate    full-corpus evaluation with baselines tuned on the holdout: metrics.json, report.md, recall_at_k.png
index       FAISS index of the item embeddings with its recall self-check
gate        floors, lift over most-popular, optional best baseline, regression against the published run (publish lock)
publish     point ``latest`` at this run, prune old runs (same lock)
==========  ===========================================================================================

A rerun of a run id skips finished stages (a completed run is not redone unless ``force``); the run lock keeps two
processes off one run directory, and the publish lock serialises gate + publish across concurrent runs.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Callable, Optional

import ml_collections
import numpy as np
from absl import logging

import retrieval
from retrieval import artifacts
from retrieval.data import handoff, prepare
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import GateError
from retrieval.jobs import budget, config_checks, evaluable, gate, identity, provenance, tuning
from retrieval.jobs import warm_start as warm_start_lib
from retrieval.jobs.publish import ModelDirectory
from retrieval.jobs.stages import StageRunner
from retrieval.locations import new_run_id


@dataclasses.dataclass
class Outcome:
    """What a run ended with."""

    run_dir: str
    published: bool
    metrics: dict
    reasons: list


class TrainingJob:
    """One run of the pipeline for ``config`` under ``<output_dir>/<config.name>/<run_id>``."""

    def __init__(self, config: ml_collections.ConfigDict, output_dir: str, run_id: Optional[str] = None,
                 force: bool = False):
        # Each key against its rule (pipelines.train ran every check already; a library call gets the keys' rules).
        config_checks.validate_config(config, cross_checks=False)
        self.config = config
        self.model_dir = ModelDirectory(artifacts.Path(output_dir) / config.name)
        self.run_id = run_id or new_run_id()
        self.paths = self.model_dir.run_paths(self.run_id)
        self.force = force
        self.stages = StageRunner(self.paths)
        self._trained = None  # the train stage's model (or Item2Vec vectors) when it ran in this process
        self._started = time.monotonic()
        self.model_type = config.model_type

    # ------------------------------------------------------------------ orchestration
    def run(self, on_prepared: Optional[Callable[[Path], None]] = None) -> Outcome:
        """Runs (or resumes) every stage; ``on_prepared`` is called with the run directory once the data is prepared
        and found evaluable (``evaluable``): from then on a failure leaves a run worth naming."""
        self._started = time.monotonic()  # train.time_budget_s counts from here
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with self.model_dir.run_lock(self.run_id):
            run_identity = identity.RunIdentity.of(self.config)
            if self.force:
                logging.info("--force: redoing every stage of %s from scratch", self.run_id)
                for directory in (self.paths.stages, self.paths.checkpoints):
                    shutil.rmtree(directory, ignore_errors=True)
            else:
                identity.check_resume(self.paths, run_identity, self.run_id)
            self._write_snapshot(run_identity)
            self.stages.run("prepare", self._prepare)
            if on_prepared is not None:
                on_prepared(self.paths.root)
            self.stages.run("train", self._train)
            self.stages.run("export", self._export)
            self._write_manifest(None)  # evaluation and serving read the exported metric from it
            metrics = self.stages.run("evaluate", self._evaluate)
            self.stages.run("index", self._index)
            with self.model_dir.publish_lock():
                decision = self.stages.run("gate", lambda: self._gate(metrics))
                if decision["passed"]:
                    self.stages.run("publish", self._publish)
            self._write_manifest(decision)
        if not decision["passed"]:
            raise GateError("; ".join(decision["reasons"]) + f" (run kept at {self.paths.root}, latest untouched)")
        return Outcome(str(self.paths.root), True, metrics, [])

    def _write_snapshot(self, run_identity: identity.RunIdentity) -> None:
        """Config snapshot, the run's identity (``identity``: what a rerun must match to resume) and provenance,
        written once per run (again only with ``force``): asking git is not repeated at every manifest update."""
        if not self.paths.config.exists() or self.force:
            artifacts.write_json(self.paths.config, run_identity.config)
        if not self.paths.manifest.exists() or self.force:
            c = self.config
            artifacts.write_json(self.paths.manifest, {
                "run_id": self.run_id, "version": self.run_id, "model_name": c.name, "model_type": self.model_type,
                "seed": c.seed, "package_version": retrieval.__version__, "packages": provenance.package_versions(),
                "git_revision": provenance.git_revision(), "data_fingerprint": run_identity.data,
                "lineage": identity.lineage_of(c).as_dict(),
                "fingerprint": run_identity.digest, "status": "running",
            })

    def _write_manifest(self, decision: Optional[dict]) -> None:
        """Updates the manifest with the stage timings, the data's order and examples, the export's fields and, once
        decided, the gate."""
        manifest = artifacts.read_json(self.paths.manifest)
        manifest["stage_seconds"] = dict(self.stages.timings)
        manifest["status"] = "running" if decision is None else ("published" if decision["passed"] else "rejected")
        if decision is not None:
            manifest["gate"] = decision
        manifest.update(self.stages.summary("export") or {})
        prepared = self.stages.summary("prepare") or {}
        manifest["data_order"] = prepared.get("order")
        manifest["data_examples"] = prepared.get("examples")  # kind (next_item, set, no_examples), streamed, count
        artifacts.write_json(self.paths.manifest, manifest)

    # ------------------------------------------------------------------ stages
    def _prepare(self) -> dict:
        """The prepare tasks (``retrieval.data.prepare``) as the config's spec asks (``handoff.PrepareSpec``)."""
        spec = handoff.PrepareSpec.from_config(self.config, self.paths.root, self._warm_start_source())
        summary = spec.run().as_dict()
        evaluable.check_prepared(self.paths, self.config, spec.settings)
        return summary

    def _warm_start_source(self) -> Optional[artifacts.RunPaths]:
        """The published run whose vocabularies (and id tables) a warm start keeps (``publish.warm_start``)."""
        lineage = identity.lineage_of(self.config).name
        previous = self.model_dir.published(lineage) if self.config.publish.warm_start else None
        return previous if previous is not None and previous.model_item_vocab.exists() else None

    def _vocabularies(self) -> tuple[Vocabulary, Vocabulary]:
        return Vocabulary.load(self.paths.item_vocab), Vocabulary.load(self.paths.user_vocab)

    def _training_run(self, budgeted: bool = False) -> tuning.TrainingRun:
        """What training reads, with the schedule for the size of the catalogue (``tuning.for_catalogue``);
        ``budgeted``: with the run's time budget (``train.time_budget_s``), for which the baselines are tuned now."""
        prepared = handoff.PreparedData.read(self.stages.summary("prepare"), self.paths)
        item_vocab = self._vocabularies()[0]
        config, schedule = tuning.for_catalogue(self.config, item_vocab.size - NUM_RESERVED)
        time_budget = None
        if budgeted and config.train.time_budget_s > 0:
            from retrieval.evaluation import runs

            names, tuned = runs.tune_baselines(self.paths.root, item_vocab.ids)
            time_budget = budget.for_run(self._started + config.train.time_budget_s, self.paths, names, tuned,
                                         item_vocab.size - NUM_RESERVED)
        return tuning.TrainingRun(config, self.paths, prepared, self._warm_start_source(), schedule, time_budget)

    def _train(self) -> dict:
        """Item2Vec's vectors, or the two-tower model of ``tuning.train`` (tune on the holdout, then refit)."""
        if self.model_type == "item2vec":
            self._trained = self._item2vec_vectors()
            return {"vectors": list(self._trained.shape)}
        run = self._training_run(budgeted=True)
        if run.schedule:
            logging.info("training on the schedule of a %s", run.schedule)
        self._trained, summary = tuning.train(run)
        warm_start_lib.save_id_tables(self._trained, self.paths)
        return {**summary, "schedule": run.schedule} if run.schedule else summary

    def _item2vec_vectors(self) -> np.ndarray:
        """Trains Item2Vec (or restores the finished training from its last checkpoint); vectors by item index."""
        from retrieval.models import item2vec

        item_vocab, user_vocab = self._vocabularies()
        config_checks.check_tables(self.config, item_vocab.size, user_vocab.size)
        users, items, timestamps = prepare.training_indices(self.paths, item_vocab, user_vocab)
        return item2vec.train_item2vec(self.config.item2vec, users, items, timestamps, item_vocab,
                                       checkpoint_dir=self.paths.checkpoints)

    def _export(self) -> dict:
        """The trained model (this process's, or restored when the train stage finished in an earlier attempt)."""
        from retrieval import export

        item_vocab, user_vocab = self._vocabularies()
        if self.model_type == "item2vec":
            vectors = self._trained if self._trained is not None else self._item2vec_vectors()
            return export.export_item2vec(vectors, item_vocab, self.paths, self.config.model.max_history)
        model = self._trained if self._trained is not None else tuning.final_model(self._training_run())
        return export.export_two_tower(model, item_vocab, user_vocab, self.paths)

    def _evaluate(self) -> dict:
        from retrieval.evaluation.runs import evaluate_run

        e = self.config.eval
        metrics = evaluate_run(self.paths.root, ks=tuple(e.ks), exclude_train=e.exclude_train,
                               baselines=tuple(e.baselines), n_bootstrap=e.bootstrap, seed=self.config.seed)
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and "/" not in k}

    def _index(self) -> dict:
        from retrieval.index.run_index import build_run_index

        i = self.config.index
        index = build_run_index(self.paths, factory=i.factory, recall_floor=i.recall_floor, recall_k=i.recall_k,
                                seed=self.config.seed)
        return {key: index.manifest.get(key) for key in ("factory", "count", "search_params", "self_check")}

    def _gate(self, metrics: dict) -> dict:
        g = self.config.gate
        latest = self.model_dir.published(identity.lineage_of(self.config).name)  # never another dataset's run
        published = None
        if latest is not None and latest.root != self.paths.root and latest.metrics.exists():
            published = artifacts.read_json(latest.metrics)
        evaluation = artifacts.read_json(self.paths.metrics) if self.paths.metrics.exists() else {}
        decision = gate.check(metrics, gate.parse_floors(g.floors), published, tuple(g.compare), g.max_regression,
                              g.min_lift_over_popular, gate.popular_metrics(evaluation),
                              identity.validation_scored(self.config, self._data_digests()),
                              gate.baseline_metrics(evaluation) if g.get("beat_best_baseline") else None)
        if decision.passed:  # a refusal is said once, by the GateError that run() raises
            logging.info("gate passed%s", f" against {latest.root.name}" if published
                         else " (no published run of this lineage to compare with)")
        return decision.as_dict()

    def _data_digests(self) -> dict:
        """The input files' SHA-256 by path, as the run recorded them when it started."""
        return artifacts.read_json(self.paths.manifest).get("data_fingerprint") or {}

    def _publish(self) -> dict:
        lineage = identity.lineage_of(self.config).name
        production = self.model_dir.publish(self.run_id, lineage)
        removed = self.model_dir.retain(self.config.publish.keep_last)
        return {"latest": self.run_id, "lineage": lineage, "production": production, "removed": removed,
                "link": str(self.model_dir.lineage_dir(lineage).relative_to(self.model_dir.root) / "latest")}
