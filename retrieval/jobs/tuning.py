"""The two-tower training policy: tune on the automatic holdout, then refit (``train.validation_fraction``,
``train.refit``, ``train.refit_epochs``).

:func:`train` runs two phases, each resumable from its checkpoints:

1. :func:`tune`: only when the prepare stage held out part of the training data (``PreparedData.holdout``): trains
   on the rest, early-stopping on the holdout, and records the curve and the best epoch
   (``checkpoints/tuning/record.json``: a rerun reads it instead of tuning again).
2. :func:`refit`: the final model. Without a holdout, the run as configured; with one and ``train.refit``, all the
   training data for the best epoch count, or with ``train.refit_epochs`` the tuned weights continued for that
   many epochs from the learning rate their schedule had reached; without ``train.refit``, or where a time budget
   cannot hold a refit from scratch (``refit_skipped`` in the record), the tuned model itself.

The job hands over what training needs (:class:`TrainingRun`); nothing here reads the job. :func:`fit` (one phase's
model and training), :func:`tuned_model` and :func:`validation_fn` (the early-stopping metric) are public for
experiments.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import ml_collections
import numpy as np
import pandas as pd
from absl import logging

from retrieval import artifacts
from retrieval.data import handoff, prepare
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.jobs import budget as budget_lib
from retrieval.jobs import config_checks
from retrieval.jobs import teacher as teacher_lib
from retrieval.jobs import variants as variants_lib
from retrieval.jobs import warm_start as warm_start_lib

if TYPE_CHECKING:  # TensorFlow loads only when training runs
    from retrieval.training import FitResult, StopBelow

PHASES = ("final", "tuning", "refit")  # the configured run; on the training data minus the holdout; after tuning


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """What training reads: the run's config and paths, the facts of its prepared data, and the published run whose
    id rows a warm start copies (the one the prepare stage kept the vocabularies stable against)."""

    config: ml_collections.ConfigDict
    paths: artifacts.RunPaths
    data: handoff.PreparedData
    warm_start: Optional[artifacts.RunPaths] = None
    schedule: Optional[str] = None  # what for_catalogue changed in config.train, if anything
    budget: Optional[budget_lib.TimeBudget] = None  # train.time_budget_s: the epochs set from the measured epoch

    def vocabularies(self) -> tuple[Vocabulary, Vocabulary]:
        return Vocabulary.load(self.paths.item_vocab), Vocabulary.load(self.paths.user_vocab)

    @property
    def tuning_checkpoints(self) -> Path:
        return self.paths.checkpoints / "tuning"


def for_catalogue(config: ml_collections.ConfigDict, n_items: int) -> tuple[ml_collections.ConfigDict, Optional[str]]:
    """The config training runs for a catalogue of ``n_items`` items, and a note when it differs from ``config``:
    from ``train.large_catalogue_items`` items on (when > 0), the ``train.large_catalogue`` values replace their
    ``train.*`` namesakes (a shorter schedule with a warm refit and a sampled validation, for catalogues where the
    configured one would take too long: docs/objectives.md, "Which objective, for which data")."""
    t = config.train
    if not t.large_catalogue_items or n_items < t.large_catalogue_items:
        return config, None
    effective = ml_collections.ConfigDict(config.to_dict())
    replaced = dict(t.large_catalogue.items())  # the keys settings.TRAIN declares under large_catalogue
    effective.train.update(replaced)
    note = (f"large catalogue ({n_items:,} items >= train.large_catalogue_items {t.large_catalogue_items:,}): "
            + ", ".join(f"train.{key}={value}" for key, value in replaced.items()))
    return effective, note


def train(run: TrainingRun) -> tuple[Any, dict]:
    """Both phases: the final model and the train stage's summary (steps, best epoch and metric, and when tuned the
    tuning record and whether the model was refit)."""
    tuned, tuned_now = tune(run)
    if tuned is not None and not _refits(run, tuned):  # the tuned model is the final one
        model = tuned_now if tuned_now is not None else fit(run, "tuning")[0]
        return model, {"steps": tuned["steps"], "best_metric": tuned["best_metric"],
                       "best_epoch": tuned["best_epoch"], "stopped_early": tuned["stopped_early"], "tuning": tuned,
                       "refit": False, "sparse_updates": _sparse_updates(model)}
    model, result = refit(run, tuned)
    out = {"steps": result.step, "best_metric": result.best_metric, "best_epoch": result.best_epoch,
           "stopped_early": result.stopped_early, "sparse_updates": _sparse_updates(model),
           "final_loss": float(result.history["loss"][-1]) if result.history.get("loss") else None}
    if tuned is not None:  # the refit has no validation: its best epoch and metric are the tuning's
        out.update(tuning=tuned, refit=True, history=result.history, best_epoch=tuned["best_epoch"],
                   best_metric=tuned["best_metric"], stopped_early=tuned["stopped_early"])
    return model, out


def final_model(run: TrainingRun) -> Any:
    """The finished training's model, restored from its checkpoints (a rerun that resumes after the train stage)."""
    return refit(run, tune(run)[0])[0]


def tune(run: TrainingRun) -> tuple[Optional[dict], Any]:
    """Phase 1: the tuning record (None without a holdout) and the model tuned now (None when an earlier attempt
    recorded it).

    With ``train.teacher_when = "item_item_leads"`` (and a teacher, ``train.teacher_items``, on set data held in
    memory), the towers are tuned without the teacher first; when the run's tuned teacher (``train.teacher``,
    RP3beta by default) reads a higher validation recall than their best epoch (the report's baseline, tuned on the
    same holdout: ``runs.tuned_baseline``), they are tuned again with it (``checkpoints/tuning/teacher``), and the
    tuning with the better best epoch is kept. The record says which (``teacher``, ``teacher_trial``); the refit and
    the export follow it (``_choice``). So the teacher costs a second tuning only where an item-item walk leads, and
    is kept only where it wins on the holdout (benchmarks/JOURNAL.md, "Issue 47": +0.005 on Gowalla, where RP3beta
    leads; -0.001 on Yelp2018, where it does not). With ``train.teacher_probe_epochs`` (the large-catalogue
    schedule's 3), the first tuning is a probe: when its validation recall at that epoch is below ``PROBE_SHARE`` of
    the teacher's, it stops there and the tuning with the teacher follows and is kept, which saves the rest of a
    tuning whose outcome the probe foretells. Then each of ``train.variants`` is tuned too where the first tuning
    was cheap (``_try_variants``)."""
    if run.data.holdout is None:
        return None, None
    record = run.tuning_checkpoints / "record.json"
    if record.exists():
        return artifacts.read_json(record), None
    t = run.config.train
    suited = [name for name in t.variants if not variants_lib.VARIANTS[name].unsuited(run.config, run.data)]
    logging.info("training in phases, each with its own ETA: tuning on the automatic holdout (early-stopped)%s, then %s",
                 f", then the variant{'s' * (len(suited) > 1)} {', '.join(suited)} if the tuning part has at most "
                 f"{t.variant_max_examples:,} examples" if suited else "", "a refit on all training data" if t.refit else "no refit")
    configured = Choice(_teacher_always(run), run.tuning_checkpoints)
    teacher_rule = (t.teacher_items and t.teacher_when == "item_item_leads" and run.data.is_set
                    and not run.data.streamed)
    leader = _teacher_validation(run) if teacher_rule else None
    probe = _probe(run, leader)
    tuned, model = _tune_variant(run, configured, probe)
    tuned["teacher"] = configured.teacher
    probed = _probe_score(run, tuned, probe) if probe is not None else None
    gave_up = probed is not None and probed < probe.floor
    if leader is not None and (gave_up or leader > tuned["best_metric"]):
        if gave_up:
            logging.info("teacher: the towers read %s %.4f at epoch %d, below %.2f x the tuned %s's %.4f: their "
                         "tuning stops there and they are tuned again with its top %d items per user%s",
                         t.eval_metric_name, probed, probe.epoch, PROBE_SHARE, t.teacher, leader, t.teacher_items,
                         _teacher_variant_note(run))
        else:
            logging.info("teacher: the tuned %s reads %s %.4f on the holdout, above the towers' %.4f: tuning "
                         "them again with its top %d items per user%s", t.teacher, t.eval_metric_name, leader,
                         tuned["best_metric"], t.teacher_items, _teacher_variant_note(run))
        variant = t.teacher_variant or None
        taught, taught_model = _tune_variant(run, Choice(True, run.tuning_checkpoints / TEACHER_DIR, variant))
        trial = {"teacher": t.teacher, "teacher_metric": leader, "without": tuned["best_metric"],
                 "with": taught["best_metric"],
                 "kept": bool(gave_up or taught["best_metric"] > tuned["best_metric"]), "variant": variant,
                 "probe": {"epoch": probe.epoch, "floor": probe.floor, "gave_up": gave_up} if probe else None}
        logging.info("teacher: %s on the holdout (%.4f with it, %.4f without%s)",
                     "kept" if trial["kept"] else "not kept", trial["with"], trial["without"],
                     f" after the probe's {probe.epoch} epochs" if gave_up else "")
        if trial["kept"]:
            tuned, model = {**taught, "teacher": True, "checkpoints": TEACHER_DIR, "variant": variant}, taught_model
        tuned["teacher_trial"] = trial
    elif leader is not None:
        logging.info("teacher: not needed (the towers' holdout %s %.4f is at or above the tuned %s's %.4f)",
                     t.eval_metric_name, tuned["best_metric"], t.teacher, leader)
    tuned, model = _try_variants(run, tuned, model)
    short = _refit_short(run, tuned)
    if short:
        logging.warning("refit skipped: %s; the tuned towers are the final model (best epoch %s, %s %.4f on the "
                        "holdout)", short, tuned["best_epoch"], t.eval_metric_name, tuned["best_metric"] or float("nan"))
        tuned["refit_skipped"] = short
    artifacts.write_json(record, tuned)
    return tuned, model


TEACHER_DIR = "teacher"  # under checkpoints/tuning: the towers tuned again with the teacher


@dataclasses.dataclass(frozen=True)
class Choice:
    """Which towers a phase trains: with or without the teacher, the variant of ``train.variants`` (None: the
    configured towers), and the tuning's checkpoint directory."""

    teacher: bool
    checkpoints: Path
    variant: Optional[str] = None


def _tune_variant(run: TrainingRun, choice: Choice, probe: Optional[StopBelow] = None) -> tuple[dict, Any]:
    """One tuning of the towers ``choice`` names, in its own checkpoint directory, its record kept there
    (``variant.json``, with the seconds it took) so that a resumed run does not train it again; the model when trained
    now. ``probe``: give the tuning up after the probe's epoch when it reads below the probe's floor."""
    path = choice.checkpoints / "variant.json"
    if path.exists():
        return artifacts.read_json(path), None
    start = time.monotonic()
    model, result = fit(run, "tuning", choice=choice, stop_below=probe)
    tuned = {"best_epoch": result.best_epoch, "best_metric": result.best_metric, "steps": result.step,
             "stopped_early": result.stopped_early, "best_learning_rate": result.best_learning_rate,
             "history": result.history, "seconds": time.monotonic() - start}
    logging.info("tuning on the automatic holdout%s%s: best %s %.4f at epoch %s",
                 " with the teacher" if choice.teacher else "", f", variant {choice.variant}" if choice.variant else "",
                 run.config.train.eval_metric_name, result.best_metric or float("nan"), result.best_epoch)
    artifacts.write_json(path, tuned)
    return tuned, model


def _try_variants(run: TrainingRun, tuned: dict, model: Any) -> tuple[dict, Any]:
    """The tuning record after each of ``train.variants`` was tuned on the same holdout (with the teacher when the
    towers kept it; ``checkpoints/tuning/<variant>``) and the best of all kept (a variant only when it leads the towers
    kept before it by more than ``train.variant_min_gain``, relative); a variant is tried only when the tuning
    part has at most ``train.variant_max_examples`` examples, and only with a validation metric to compare.
    The record gains ``variant`` (the one kept, or None), ``variant_trials`` and ``without_variant`` (the metric before
    them)."""
    t = run.config.train
    if not t.variants or tuned["best_metric"] is None:
        return tuned, model
    best, trials = {**tuned, "variant": tuned.get("variant")}, []
    examples = int(run.data.holdout.get("examples") or 0)
    for name in t.variants:
        unsuited = variants_lib.VARIANTS[name].unsuited(run.config, run.data)
        reason = unsuited or _too_many_examples(examples, t.variant_max_examples) or _budget_short(run, tuned, best)
        if reason:
            logging.info("variant %s not tried: %s",
                         name if unsuited else variants_lib.describe(run.config, name, run.data), reason)
            trials.append({"variant": name, "tried": False, "reason": reason})
            continue
        logging.info("tuning variant %s on the holdout", variants_lib.describe(run.config, name, run.data))
        trial, trial_model = _tune_variant(run, Choice(bool(tuned["teacher"]), run.tuning_checkpoints / name, name))
        kept = (trial["best_metric"] is not None
                and trial["best_metric"] > best["best_metric"] * (1.0 + t.variant_min_gain))
        logging.info("variant %s: %s on the holdout (%s %.4f, against %.4f; kept above %.4f)", name,
                     "kept" if kept else "not kept", t.eval_metric_name, trial["best_metric"] or float("nan"),
                     best["best_metric"], best["best_metric"] * (1.0 + t.variant_min_gain))
        trials.append({"variant": name, "tried": True, "metric": trial["best_metric"], "kept": kept})
        if kept:
            best, model = {**best, **trial, "checkpoints": name, "variant": name}, trial_model
    return {**best, "variant_trials": trials, "without_variant": tuned["best_metric"]}, model


def _too_many_examples(examples: int, most: int) -> Optional[str]:
    """Why a variant is not tried on a tuning part of ``examples`` (None: it is small enough)."""
    if examples <= most:
        return None
    return f"the tuning part has {examples:,} examples, more than train.variant_max_examples = {most:,}"


def _refit_scale(train: Any) -> float:
    """A refit epoch's examples over a tuning epoch's: all training data over the tuning part."""
    return 1.0 / max(1.0 - train.validation_fraction, 1e-6)


def _epoch_seconds(record: dict) -> float:
    """A tuning's seconds per epoch (its validation and first compilation included: on the safe side), from its
    record (0 for a record without its seconds)."""
    return float(record.get("seconds") or 0.0) / max(len(record.get("history", {}).get("loss") or ()), 1)


def _refit_short(run: TrainingRun, tuned: dict) -> Optional[str]:
    """Why the time budget cannot hold the refit from scratch of the towers ``tuned`` kept (None: it can, there is
    no budget, or the refit is warm or off). Such a refit is all or nothing: cut to what is left, its cosine anneals
    over fewer epochs than the holdout chose, and the model ends worse than the tuned one (the bundled data's cut to
    one epoch read like most-popular, and the quality gate refused it). Its cost is the tuning's measured plan:
    one compilation and the best epoch count of training epochs (validation left out), scaled to all training data.
    A warm refit (``train.refit_epochs``) plans its own epochs instead, at least one."""
    from retrieval import training

    t = _kept_train(run, tuned)
    if run.budget is None or not t.refit or _warm_refit(t, tuned) or not tuned.get("best_epoch"):
        return None
    epoch = training.EpochTime.planned(run.tuning_checkpoints / tuned.get("checkpoints", ""))
    if epoch is None:
        return None
    need = epoch.compile_seconds + tuned["best_epoch"] * _refit_scale(t) * epoch.steady_training_seconds
    left = run.budget.left_s()
    if left >= need:
        return None
    return (f"the time budget has {max(left, 0.0):.0f} s left, under the {need:.0f} s of a refit from scratch for "
            f"{tuned['best_epoch']} epochs")


def _warm_refit(train: ml_collections.ConfigDict, tuned: dict) -> bool:
    """Whether the refit continues the tuned weights (``train.refit_epochs``, from the learning rate the tuning's
    schedule had at its best epoch) rather than training from scratch."""
    return bool(train.refit_epochs) and tuned.get("best_learning_rate") is not None


def _refits(run: TrainingRun, tuned: dict) -> bool:
    """Whether the towers ``tuned`` kept are refit on all training data: their ``train.refit``, unless the tuning
    found no time left for it (``refit_skipped``)."""
    return bool(_kept_train(run, tuned).refit) and not tuned.get("refit_skipped")


def _budget_short(run: TrainingRun, first: dict, kept: dict) -> Optional[str]:
    """Why the time budget cannot hold one more variant (None: it can, or there is no budget). A variant needs at
    least two epochs (the plan's first decision comes after its second), here at the pace of the towers tuned first,
    and the refit of the towers kept so far must still fit after it: their best epoch count (or
    ``train.refit_epochs``) at their own pace, scaled to all training data. Without this, a variant tried late would
    overrun the budget by its two epochs and the kept towers' refit."""
    if run.budget is None:
        return None
    t = run.config.train
    refit_s = 0.0
    if t.refit:
        epochs = t.refit_epochs or kept.get("best_epoch") or 0
        refit_s = epochs * _epoch_seconds(kept) * _refit_scale(t)
    need, left = 2 * _epoch_seconds(first) + refit_s, run.budget.left_s()
    if left >= need:
        return None
    return (f"the time budget has {max(left, 0.0):.0f} s left, under the {need:.0f} s of two epochs and the refit of "
            f"the towers kept")


PROBE_SHARE = 0.9  # of the tuned teacher's validation recall, below which train.teacher_probe_epochs gives up
# On validation parts (benchmarks/JOURNAL.md, "Issue 47: the teacher's probe"), the towers without the teacher read
# 0.84-0.86 of the tuned RP3beta's holdout recall@20 at epoch 3 of Gowalla's schedule, where the teacher is kept, and
# 0.99-1.06 on Yelp2018, where it is not needed (their whole tunings end at 0.95-0.96 and 1.05-1.18 of it).


def _probe(run: TrainingRun, leader: Optional[float]) -> Optional[StopBelow]:
    """The first tuning's probe (``train.teacher_probe_epochs``) against the tuned teacher's validation recall
    ``leader``: None when off or without it."""
    from retrieval import training

    epochs = run.config.train.teacher_probe_epochs
    return None if not epochs or leader is None else training.StopBelow(int(epochs), PROBE_SHARE * leader)


def _probe_score(run: TrainingRun, tuned: dict, probe: StopBelow) -> Optional[float]:
    """The first tuning's validation metric at the probe's epoch (None: it stopped before)."""
    scores = tuned.get("history", {}).get(run.config.train.eval_metric_name) or []
    return float(scores[probe.epoch - 1]) if len(scores) >= probe.epoch else None


def _teacher_variant_note(run: TrainingRun) -> str:
    variant = run.config.train.teacher_variant
    return f" and variant {variants_lib.describe(run.config, variant, run.data)}" if variant else ""


def _teacher_always(run: TrainingRun) -> bool:
    """Whether the configured teacher trains every phase (``train.teacher_when = "always"``)."""
    return bool(run.config.train.teacher_items) and run.config.train.teacher_when == "always"


def _choice(run: TrainingRun) -> Choice:
    """The towers the phases after tuning follow: the tuning record's choice (before it, or without a holdout, the
    config's)."""
    record = run.tuning_checkpoints / "record.json"
    tuned = artifacts.read_json(record) if record.exists() else {}
    return Choice(bool(tuned.get("teacher", _teacher_always(run))),
                  run.tuning_checkpoints / tuned.get("checkpoints", ""), tuned.get("variant"))


def _teacher_validation(run: TrainingRun) -> Optional[float]:
    """The run's tuned teacher's (``train.teacher``) validation recall at the early-stopping cut-off (None: not
    tuned, or at another cut-off). The tuning is the report's (kept in the run), on a seeded sample of the same
    holdout."""
    from retrieval.evaluation import runs

    tuned = runs.tuned_baseline(run.paths.root, run.config.train.teacher, run.vocabularies()[0].ids)
    if tuned is None or tuned.value is None or tuned.metric != f"recall@{run.config.train.eval_k}":
        return None
    return float(tuned.value)


def refit(run: TrainingRun, tuned: Optional[dict]) -> tuple[Any, FitResult]:
    """Phase 2: the final model and its ``training.FitResult`` given the tuning record ``tuned`` (see the module
    docstring); trained, or restored from the last checkpoint of a finished training."""
    t = _kept_train(run, tuned)
    if tuned is None:
        return fit(run, "final")
    if not _refits(run, tuned):
        return fit(run, "tuning")
    if _warm_refit(t, tuned):
        return fit(run, "refit", epochs=t.refit_epochs, warm_learning_rate=tuned["best_learning_rate"])
    return fit(run, "refit", epochs=tuned["best_epoch"] or t.epochs)


def _kept_train(run: TrainingRun, tuned: Optional[dict]) -> ml_collections.ConfigDict:
    """The ``train`` section the refit follows: the kept variant's, which may set its own refit."""
    variant = (tuned or {}).get("variant")
    return variants_lib.apply(run.config, variant, run.data).train if variant else run.config.train


def fit(run: TrainingRun, phase: str, epochs: Optional[int] = None, warm_learning_rate: Optional[float] = None,
        choice: Optional[Choice] = None, stop_below: Optional[StopBelow] = None) -> tuple[Any, FitResult]:
    """Builds the model and trains it (resuming from the phase's checkpoints): ``final`` (the configured run),
    ``tuning`` (the training data minus the holdout, early-stopping on it; ``checkpoints/tuning``) or ``refit`` (all
    training data for ``epochs`` epochs, no early stopping; with ``warm_learning_rate``, from the tuned weights at
    that learning rate). ``choice`` (the towers a tuning trains, see :func:`tune`) defaults to the tuning record's
    (``_choice``): its variant's config, its teacher, and while tuning its checkpoint directory. Returns the model and
    its ``training.FitResult``."""
    from retrieval import training
    from retrieval.evaluation import runs

    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
    choice = choice or _choice(run)
    prepared_cap = run.config.data.max_examples_per_user
    run = dataclasses.replace(run, config=variants_lib.apply(run.config, choice.variant, run.data))
    c, paths = run.config, run.paths
    item_vocab, user_vocab = run.vocabularies()
    config_checks.check_tables(c, item_vocab.size, user_vocab.size)  # the catalogue is known: do the tables fit?
    tuning = phase == "tuning"
    examples = run.data.load_examples(paths, c, tuning=tuning)
    if c.data.max_examples_per_user and c.data.max_examples_per_user != prepared_cap:  # a variant's own examples
        examples = examples.most_recent(c.data.max_examples_per_user)
    if choice.teacher and c.train.teacher_items and hasattr(examples, "with_teacher"):  # set pairs held in memory
        teacher_users, teacher_items, sureness = teacher_lib.pairs(
            c.train.teacher, examples.user, examples.label, user_vocab.size, item_vocab.size, c.train.teacher_items,
            runs.tuned_params(paths.root, c.train.teacher, item_vocab.ids))
        examples = examples.with_teacher(teacher_users, teacher_items,
                                         sureness if c.train.teacher_weighting == "score" else None)
    logging.info("%s: %d %s examples (%s)", phase, len(examples), "set" if run.data.is_set else "next-item",
                 "streamed from shards" if run.data.streamed else "in memory")
    train_config = c.train
    if phase == "refit":
        train_config = ml_collections.ConfigDict(c.train.to_dict())
        train_config.epochs, train_config.early_stopping_patience = int(epochs), 0
        if warm_learning_rate is not None:
            train_config.learning_rate = float(warm_learning_rate)
    checkpoints = choice.checkpoints if tuning else paths.checkpoints
    make_model = _model_maker(run, tuning_vocabulary(run, item_vocab) if tuning else item_vocab, user_vocab)
    model = make_model()
    if warm_learning_rate is not None and not any(checkpoints.glob("ckpt*")):
        training.build_variables(model, examples)
        # The trainable weights only: the non-trainable state (log-Q, the warm flags) is derived from the counts,
        # the tuning part's there and all the training data's here (tuning_vocabulary).
        source = tuned_model(run, make_model, examples)
        for target, value in zip(model.trainable_weights, source.trainable_weights, strict=True):
            target.assign(value)
        logging.info("refit: continuing from the tuned weights of %s", _latest_tuning_checkpoint(run))
    elif run.warm_start is not None and not any(checkpoints.glob("ckpt*")):
        training.build_variables(model, examples)  # the id tables must exist before rows are copied in
        warm_start_lib.load_into(model, {"item": item_vocab, "user": user_vocab}, run.warm_start)
    evaluate_fn = None if phase == "refit" else validation_fn(run, model, item_vocab, user_vocab, tuning)
    plan_epochs = None
    # A warm refit plans too: its length is train.refit_epochs, cut to what the budget has left. On a slower 2-core
    # box, Gowalla's warm refit of 4 epochs once ran 386 s where 128 s were left, and the run ended 272 s over its 900
    # (benchmarks/JOURNAL.md, "Issue 47: the budget on a slower box"). A refit from scratch runs its tuned length or,
    # where the budget cannot hold it, not at all (_refit_short).
    if run.budget is not None and (phase != "refit" or warm_learning_rate is not None):
        plan_epochs = budget_lib.plan(run.budget, phase, train_config.epochs, refit=c.train.refit,
                                      refit_epochs=c.train.refit_epochs,
                                      refit_scale=_refit_scale(c.train))
    result = training.fit(model, examples, train_config, checkpoint_dir=checkpoints,
                          tensorboard_dir=paths.tensorboard / "tuning" if tuning else paths.tensorboard,
                          evaluate_fn=evaluate_fn, plan_epochs=plan_epochs, phase=_phase_name(phase, choice),
                          stop_below=stop_below)
    return model, result


def _phase_name(phase: str, choice: Choice) -> str:
    """What the epoch lines of a phase start with: ``tuning``, ``tuning (softer)``, ``tuning (teacher)``,
    ``refit`` or ``training``."""
    if phase != "tuning":
        return "refit" if phase == "refit" else "training"
    what = [name for name, on in (("teacher", choice.teacher), (choice.variant, choice.variant)) if on]
    return f"tuning ({', '.join(what)})" if what else "tuning"


def tuning_vocabulary(run: TrainingRun, item_vocab: Vocabulary) -> Vocabulary:
    """``item_vocab`` with the counts of the tuning part (the training data minus the automatic holdout): the tuning
    model's log-Q, sampler and warm flags must not see the held-out interactions, or every validation target gets a
    log-Q lift of ``log((c + v) / c)`` and the choices made on the holdout are biased. Ids and indices are unchanged,
    so the tuned weights fit the refit's model."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    items = ds.dataset(str(prepare.tuning_data(run.paths, "train")), format="parquet").to_table(columns=["item_id"])
    counts = pc.value_counts(items.column("item_id").combine_chunks())
    indices = item_vocab.lookup(counts.field("values").to_numpy(zero_copy_only=False))
    tuned = np.zeros_like(item_vocab.counts)
    np.add.at(tuned, indices, counts.field("counts").to_numpy())
    tuned[:NUM_RESERVED] = 0  # ids outside the vocabulary (OOV) are no item's count
    return Vocabulary(item_vocab.ids, tuned)


def _model_maker(run: TrainingRun, item_vocab: Vocabulary, user_vocab: Vocabulary) -> Callable[[], Any]:
    """A function building a fresh model of the run's configuration in the configured strategy's scope."""
    import tensorflow as tf

    from retrieval import distributed
    from retrieval.models import build_model
    from retrieval.models import config as model_config

    c, sets = run.config, run.data.is_set
    strategy = distributed.make_strategy(c.train.strategy, ps_shards=c.train.ps_shards,
                                         ps_min_shard_bytes=c.train.ps_min_shard_bytes)

    def make_model():
        # TensorFlow's global seed: the layers that draw without a seed of their own (the self-attentive tower's
        # dropouts: Keras's MultiHeadAttention takes none) then draw the same masks on every run. Without it the
        # variant's holdout read 0.3060-0.3130 on the bundled data at one commit, around its keep threshold.
        tf.random.set_seed(c.seed)
        with strategy.scope():
            return build_model(c.model, item_vocab, user_vocab,
                               handoff.feature_arrays(c.data, run.paths, "item", item_vocab),
                               handoff.feature_arrays(c.data, run.paths, "user", user_vocab),
                               inference_history=c.model.inference_history if sets else None,
                               inference_part_size=(model_config.inference_part_size(c.model, c.data.history_keep)
                                                    if sets else 0), set_data=sets)

    return make_model


def tuned_model(run: TrainingRun, make_model: Optional[Callable[[], Any]] = None, examples: Any = None) -> Any:
    """A fresh model holding the weights of the tuning run's last checkpoint (which ``training.fit`` saves after
    early stopping restored the best epoch's weights). A refit copies them from this second model: restoring into
    the refit's own model would also queue the tuning optimizer's step and slots (a checkpoint restores variables
    created later), and the refit would resume there."""
    import tensorflow as tf

    from retrieval import training

    latest = _latest_tuning_checkpoint(run)
    if make_model is None:
        make_model = _model_maker(run, *run.vocabularies())
    if examples is None:
        examples = run.data.load_examples(run.paths, run.config, tuning=True)
    model = make_model()
    training.build_variables(model, examples)
    tf.train.Checkpoint(model=model).restore(latest).expect_partial().assert_existing_objects_matched()
    return model


def _latest_tuning_checkpoint(run: TrainingRun) -> str:
    """The last checkpoint of the tuned variant (``_choice``)."""
    import tensorflow as tf

    directory = _choice(run).checkpoints
    latest = tf.train.latest_checkpoint(str(directory))
    if latest is None:
        raise FileNotFoundError(f"no tuning checkpoint under {directory} to refit from")
    return latest


def validation_fn(run: TrainingRun, model: Any, item_vocab: Vocabulary, user_vocab: Vocabulary,
                  tuning: bool = False) -> Optional[Callable[[], float]]:
    """Validation recall@k for early stopping (``train.early_stopping_patience``), or None without validation data
    or patience; ``tuning``: on the automatic holdout, ranked against the training data minus it, with or without
    patience (a tuning without it, a variant trained to its last epoch, still reads its curve). On the user sample
    of ``train.eval_max_users``, else of ``eval.max_users``, when set (only those users' rows are read)."""
    from retrieval.evaluation import loading, runs
    from retrieval.evaluation.early_stopping import recall_fn

    config, paths = run.config, run.paths
    t = config.train
    train_path, validation_path = paths.train_data, paths.validation_data
    if tuning:
        train_path, validation_path = prepare.tuning_data(paths, "train"), prepare.tuning_data(paths, "validation")
    if (t.early_stopping_patience <= 0 and not tuning) or not validation_path.exists():
        return None
    if tuning:  # the items warm in the tuning part, as the headline ranks the items warm in all training data
        item_vocab = tuning_vocabulary(run, item_vocab)
    sample = runs.user_sample(validation_path, t.eval_max_users or config.eval.max_users, config.seed)
    if sample is None:
        train, validation = pd.read_parquet(train_path), pd.read_parquet(validation_path)
    else:
        train = loading.read_users_interactions(train_path, sample, "training data")
        validation = loading.read_users_interactions(validation_path, sample, "validation data")
    if validation.empty:
        return None
    return recall_fn(model, train, validation, item_vocab, user_vocab, k=t.eval_k)


def _sparse_updates(model: Any) -> bool:
    return getattr(model.optimizer, "sparse_updates", False)  # docs/sparse-updates.md
