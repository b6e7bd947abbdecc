"""The scheduled training job: raw log -> validated data -> model -> evaluation -> index -> gate -> published run.

Stages (each logs what it did, counts and time, and leaves a marker in ``<run>/stages/``; see ``stages``):

==========  ===========================================================================================
prepare     read and validate the log, split, build vocabularies from the training part, write them
train       examples, model, ``training.fit`` with checkpoints (resumes from the last one)
export      user-tower SavedModel and item embeddings (any model type exports the same signature)
evaluate    full-corpus evaluation with baselines: metrics.json, report.md, recall_at_k.png
index       FAISS index of the item embeddings with its recall self-check
gate        floors, lift over most-popular, regression against the published run (publish lock)
publish     point ``latest`` at this run, prune old runs (same lock)
==========  ===========================================================================================

A rerun of a run id skips finished stages (a completed run is not redone unless ``force``); the run lock keeps two
processes off one run directory, and the publish lock serialises gate + publish across concurrent runs.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Callable, Optional

import ml_collections
import numpy as np
import pandas as pd
from absl import logging

import retrieval
from retrieval import artifacts
from retrieval.data import catalogue, prepare
from retrieval.data import engine as engine_lib
from retrieval.data import features as features_lib
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import GateError, InputError
from retrieval.jobs import config_checks, evaluable, gate, identity, provenance
from retrieval.jobs import warm_start as warm_start_lib
from retrieval.jobs.locations import new_run_id
from retrieval.jobs.publish import ModelDirectory
from retrieval.jobs.stages import StageRunner
from retrieval.settings import MODEL_TYPES


@dataclasses.dataclass
class Outcome:
    """What a run ended with."""

    run_dir: str
    published: bool
    metrics: dict
    reasons: list


def _floors(text: str) -> dict:
    floors = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        try:
            floors[name.strip()] = float(value)
        except ValueError:
            raise InputError(f"gate floor {part!r} must be metric=number", field="gate.floors") from None
    return floors


def _write_parquet(frame: Optional[pd.DataFrame], path) -> None:
    if frame is None:
        return
    with artifacts.atomic_path(path) as tmp:
        frame.reset_index(drop=True).to_parquet(tmp, index=False)


class TrainingJob:
    """One run of the pipeline for ``config`` under ``<output_dir>/<config.name>/<run_id>``."""

    def __init__(self, config: ml_collections.ConfigDict, output_dir: str, run_id: Optional[str] = None,
                 force: bool = False):
        self.config = config
        self.model_dir = ModelDirectory(artifacts.Path(output_dir) / config.name)
        self.run_id = run_id or new_run_id()
        self.paths = self.model_dir.run_paths(self.run_id)
        self.force = force
        self.stages = StageRunner(self.paths)
        self._model = None
        model_type = config.get("model_type", "two_tower")
        if model_type not in MODEL_TYPES:
            raise InputError(f"unknown model_type {model_type!r}; expected one of {MODEL_TYPES}", field="model_type")
        if config.data.split not in prepare.SPLITS:
            raise InputError(f"unknown split {config.data.split!r}; expected one of {prepare.SPLITS}",
                             field="data.split")
        self.model_type = model_type

    # ------------------------------------------------------------------ orchestration
    def run(self, on_prepared: Optional[Callable[[Path], None]] = None) -> Outcome:
        """Runs (or resumes) every stage; ``on_prepared`` is called with the run directory once the data is prepared
        and found evaluable (``evaluable``): from then on a failure leaves a run worth naming."""
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
        """Updates the manifest with the stage timings, the export's fields and, once decided, the gate."""
        manifest = artifacts.read_json(self.paths.manifest)
        manifest["stage_seconds"] = dict(self.stages.timings)
        manifest["status"] = "running" if decision is None else ("published" if decision["passed"] else "rejected")
        if decision is not None:
            manifest["gate"] = decision
        manifest.update(self.stages.summary("export") or {})
        manifest["data_order"] = (self.stages.summary("prepare") or {}).get("order")
        artifacts.write_json(self.paths.manifest, manifest)

    # ------------------------------------------------------------------ stages
    def _prepare(self) -> dict:
        """The prepare tasks (``retrieval.data.prepare``) on one partition in this process, or streamed on
        ``data.num_shards`` partitions on the configured engine (``data.engine``)."""
        d = self.config.data
        settings = prepare.Settings.from_config(self.config, self.paths.root)
        with engine_lib.open_engine(d.engine if settings.num_shards > 1 else "embedded", d.engine_address,
                                    d.engine_workers, timeout_s=d.engine_timeout_s) as engine:
            summary = prepare.run(settings, engine, d.order, self._warm_start_source()).as_dict()
        self._check_prepared(settings)
        return summary

    def _check_prepared(self, settings: prepare.Settings) -> None:
        """What only the prepared data can tell, before any training (``InputError``; the stage then reruns): that
        something can be evaluated, that the index fits the catalogue, that Item2Vec's ids fit word2vec files."""
        evaluable.check(self.paths, self.config.eval.exclude_train,
                        "config.data.test_path" if self.config.data.split == "files" else "config.data.split")
        config_checks.check_index(self.config, Vocabulary.load(self.paths.item_vocab).size - NUM_RESERVED)
        if self.model_type == "item2vec":
            evaluable.check_word2vec_ids(self.paths, settings)

    def _warm_start_source(self) -> Optional[artifacts.RunPaths]:
        """The published run whose vocabularies (and id tables) a warm start keeps (``publish.warm_start``)."""
        lineage = identity.lineage_of(self.config).name
        previous = self.model_dir.published(lineage) if self.config.publish.warm_start else None
        return previous if previous is not None and previous.model_item_vocab.exists() else None

    def _vocabularies(self) -> tuple[Vocabulary, Vocabulary]:
        return Vocabulary.load(self.paths.item_vocab), Vocabulary.load(self.paths.user_vocab)

    def _features(self, which: str, vocab: Vocabulary) -> Optional[dict]:
        """Per-index feature arrays of the item or user table; items are coded by the specs the prepare stage saved
        (the ones a catalogue refresh codes a new table with)."""
        d = self.config.data
        path, declared = d[f"{which}_features_path"], d[f"{which}_features"]
        if not path:
            return None
        id_column = d.item_column if which == "item" else d.user_column
        specs = None
        if which == "item" and self.paths.item_features.exists():
            specs = features_lib.load_specs(self.paths.item_features)[1]
        return catalogue.feature_arrays(path, id_column, declared, f"data.{which}_features", vocab, specs)

    def _train(self) -> dict:
        if self.model_type == "item2vec":
            return self._train_item2vec()
        tuning = self._tune()
        if tuning is not None and not self.config.train.refit:  # the tuned model is the final one
            model = self._model if self._model is not None else self._fit_two_tower()[0]
            warm_start_lib.save_id_tables(model, self.paths)
            return {"steps": tuning["steps"], "best_metric": tuning["best_metric"], "best_epoch": tuning["best_epoch"],
                    "stopped_early": tuning["stopped_early"], "tuning": tuning, "refit": False,
                    "sparse_updates": getattr(model.optimizer, "sparse_updates", False)}  # docs/sparse-updates.md
        model, fit_result = self._fit_two_tower()
        warm_start_lib.save_id_tables(model, self.paths)
        out = {"steps": fit_result.step, "best_metric": fit_result.best_metric, "best_epoch": fit_result.best_epoch,
               "stopped_early": fit_result.stopped_early, "sparse_updates": getattr(model.optimizer, "sparse_updates", False),
               "final_loss": float(fit_result.history["loss"][-1]) if fit_result.history.get("loss") else None}
        if tuning is not None:  # the refit has no validation: its best epoch and metric are the tuning's
            out.update(tuning=tuning, refit=True, history=fit_result.history, best_epoch=tuning["best_epoch"],
                       best_metric=tuning["best_metric"], stopped_early=tuning["stopped_early"])
        return out

    def _holdout(self) -> Optional[dict]:
        """The prepare stage's automatic validation holdout (``train.validation_fraction``), when it made one."""
        return (self.stages.summary("prepare") or {}).get("tuning")

    def _tune(self) -> Optional[dict]:
        """With an automatic holdout: trains on the training data minus the holdout, early-stopping on it, and records
        the curve and the best epoch (``checkpoints/tuning/record.json``: a rerun does not tune again). The final
        model then refits on all training data for that many epochs (``train.refit``), or is this one."""
        if self._holdout() is None:
            return None
        record = self.paths.checkpoints / "tuning" / "record.json"
        if record.exists():
            return artifacts.read_json(record)
        model, result = self._fit("tuning")
        tuned = {"best_epoch": result.best_epoch, "best_metric": result.best_metric, "steps": result.step,
                 "stopped_early": result.stopped_early, "best_learning_rate": result.best_learning_rate,
                 "history": result.history}
        logging.info("tuning on the automatic holdout: best %s %.4f at epoch %s", self.config.train.eval_metric_name,
                     result.best_metric or float("nan"), result.best_epoch)
        artifacts.write_json(record, tuned)
        if not self.config.train.refit:
            self._model = model
        return tuned

    def _fit_two_tower(self):
        """The final model: trained (refit on all training data after tuning on the holdout, or trained as
        configured), or restored from the finished training's last checkpoint. The refit starts from scratch for
        the best epoch count, or with ``train.refit_epochs`` continues the tuned model's best weights for that many
        epochs, from the learning rate its schedule had reached at the best epoch."""
        holdout = self._tune()
        if holdout is None:
            return self._fit("final")
        if not self.config.train.refit:
            return self._fit("tuning")
        if self.config.train.refit_epochs and holdout.get("best_learning_rate") is not None:
            return self._fit("refit", epochs=self.config.train.refit_epochs,
                             warm_learning_rate=holdout["best_learning_rate"])
        return self._fit("refit", epochs=holdout["best_epoch"] or self.config.train.epochs)

    def _fit(self, phase: str, epochs: Optional[int] = None, warm_learning_rate: Optional[float] = None):
        """Builds the model and trains it: ``final`` (the configured run), ``tuning`` (the training data minus the
        automatic holdout, early-stopping on it; ``checkpoints/tuning``) or ``refit`` (all training data for
        ``epochs`` epochs, no early stopping; with ``warm_learning_rate``, from the tuning run's last checkpoint,
        which holds its best weights, at that peak learning rate)."""
        from retrieval import distributed, training
        from retrieval.models import build_model
        from retrieval.models import config as model_config

        c = self.config
        item_vocab, user_vocab = self._vocabularies()
        config_checks.check_tables(c, item_vocab.size, user_vocab.size)  # the catalogue is known: do the tables fit?
        sets = self._is_set_data()
        tuning = phase == "tuning"
        examples = prepare.load_examples(self.paths, not self._streamed(), c.model.max_history, c.data.history_keep,
                                         c.data.shuffle_buffer, tuning=tuning)
        logging.info("%s: %d %s examples (%s)", phase, len(examples), "set" if sets else "next-item",
                     "streamed from shards" if self._streamed() else "in memory")
        train_config = c.train
        if phase == "refit":
            train_config = ml_collections.ConfigDict(c.train.to_dict())
            train_config.epochs, train_config.early_stopping_patience = int(epochs), 0
            if warm_learning_rate is not None:
                train_config.learning_rate = float(warm_learning_rate)
        checkpoints = self.paths.checkpoints / "tuning" if tuning else self.paths.checkpoints
        strategy = distributed.make_strategy(c.train.strategy, ps_shards=c.train.ps_shards,
                                             ps_min_shard_bytes=c.train.ps_min_shard_bytes)
        def make_model():
            with strategy.scope():
                return build_model(c.model, item_vocab, user_vocab, self._features("item", item_vocab),
                                   self._features("user", user_vocab),
                                   inference_history=c.model.inference_history if sets else None,
                                   inference_part_size=(model_config.inference_part_size(c.model, c.data.history_keep)
                                                        if sets else 0), set_data=sets)

        model = make_model()
        previous = self._warm_start_source()  # the run whose vocabularies the prepare stage kept stable
        if warm_learning_rate is not None and not any(checkpoints.glob("ckpt*")):
            training.build_variables(model, examples)
            self._copy_tuned_weights(make_model(), model, examples)
        elif previous is not None and not any(checkpoints.glob("ckpt*")):
            training.build_variables(model, examples)  # the id tables must exist before rows are copied in
            warm_start_lib.load_into(model, {"item": item_vocab, "user": user_vocab}, previous)
        evaluate_fn = None if phase == "refit" else self._validation_fn(model, item_vocab, user_vocab, tuning)
        result = training.fit(model, examples, train_config, checkpoint_dir=checkpoints,
                              tensorboard_dir=self.paths.tensorboard / "tuning" if tuning else self.paths.tensorboard,
                              evaluate_fn=evaluate_fn)
        if not tuning or not c.train.refit:
            self._model = model
        return model, result

    def _copy_tuned_weights(self, tuned, model, examples) -> None:
        """Copies into ``model`` the weights of the tuning run's last checkpoint (which ``training.fit`` saves after
        early stopping restored the best epoch's weights), by way of ``tuned``, a second model of the same
        configuration: restoring into ``model`` itself would also queue the tuning optimizer's step and slots for
        the refit's optimizer (a checkpoint restores variables created later), and the refit would resume there."""
        import tensorflow as tf

        from retrieval import training

        latest = tf.train.latest_checkpoint(str(self.paths.checkpoints / "tuning"))
        if latest is None:
            raise FileNotFoundError(f"no tuning checkpoint under {self.paths.checkpoints / 'tuning'} to refit from")
        training.build_variables(tuned, examples)
        tf.train.Checkpoint(model=tuned).restore(latest).expect_partial().assert_existing_objects_matched()
        for target, source in zip(model.weights, tuned.weights, strict=True):
            target.assign(source)
        logging.info("refit: continuing from the tuned weights of %s", latest)

    def _is_set_data(self) -> bool:
        return ((self.stages.summary("prepare") or {}).get("order") or {}).get("order") == "none"

    def _streamed(self) -> bool:
        return bool(((self.stages.summary("prepare") or {}).get("examples") or {}).get("streamed"))

    def _validation_fn(self, model, item_vocab: Vocabulary, user_vocab: Vocabulary, tuning: bool = False):
        """Validation recall@k for early stopping (``train.early_stopping_patience``), or None without validation
        data or patience; ``tuning``: on the automatic holdout, ranked against the training data minus it. On the
        user sample of ``train.eval_max_users``, else of ``eval.max_users``, when set (only those users' rows are
        read)."""
        from retrieval.evaluation import loading, runs
        from retrieval.evaluation.early_stopping import recall_fn

        t, paths = self.config.train, self.paths
        train_path, validation_path = paths.train_data, paths.validation_data
        if tuning:
            train_path, validation_path = prepare.tuning_data(paths, "train"), prepare.tuning_data(paths, "validation")
        if t.early_stopping_patience <= 0 or not validation_path.exists():
            return None
        sample = runs.user_sample(validation_path, t.get("eval_max_users", 0) or self.config.eval.max_users,
                                  self.config.seed)
        if sample is None:
            train, validation = pd.read_parquet(train_path), pd.read_parquet(validation_path)
        else:
            train = loading.read_users_interactions(train_path, sample, "training data")
            validation = loading.read_users_interactions(validation_path, sample, "validation data")
        if validation.empty:
            return None
        return recall_fn(model, train, validation, item_vocab, user_vocab, k=t.eval_k)

    def _train_item2vec(self) -> dict:
        self._model = self._item2vec_vectors()
        return {"vectors": list(self._model.shape)}

    def _item2vec_vectors(self) -> np.ndarray:
        """Trains Item2Vec (or restores the finished training from its last checkpoint); vectors by item index."""
        from retrieval.models import item2vec

        item_vocab, user_vocab = self._vocabularies()
        config_checks.check_tables(self.config, item_vocab.size, user_vocab.size)
        users, items, timestamps = prepare.training_indices(self.paths, item_vocab, user_vocab)
        return item2vec.train_item2vec(self.config.item2vec, users, items, timestamps, item_vocab,
                                       checkpoint_dir=self.paths.checkpoints)

    def _export(self) -> dict:
        item_vocab, user_vocab = self._vocabularies()
        if self.model_type == "item2vec":
            from retrieval import export

            vectors = self._model if self._model is not None else self._item2vec_vectors()
            return export.export_item2vec(vectors, item_vocab, self.paths, self.config.model.max_history)
        from retrieval import export

        model = self._model if self._model is not None else self._fit_two_tower()[0]
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
        decision = gate.check(metrics, _floors(g.floors), published, tuple(g.compare), g.max_regression,
                              g.min_lift_over_popular, gate.popular_metrics(evaluation),
                              identity.validation_scored(self.config, self._data_digests()))
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
