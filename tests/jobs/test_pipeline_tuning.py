"""One command that tunes honestly: with early stopping and no validation data, the run holds out part of the
training data (train.validation_fraction), early-stops on it, and refits on all training data for the best epoch
count (train.refit); the test data take no part in either."""

import math

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from retrieval import artifacts, training
from retrieval.data import handoff, prepare
from retrieval.jobs import tuning
from retrieval.jobs.job import TrainingJob
from retrieval.sampling.frequency import static_log_q
from tests.jobs.test_pipeline_job import make_config

TUNING = {"train.validation_fraction": 0.1, "train.early_stopping_patience": 2, "train.epochs": 6,
          "gate.min_lift_over_popular": -1.0}


def _rows(frame: pd.DataFrame) -> list:
    return sorted(map(tuple, frame[["user_id", "item_id"]].astype(str).to_numpy()))


def test_sequences_hold_out_each_users_last_training_item_then_refit(log_path, tmp_path):
    # refit_epochs 0: the refit from scratch for the best epoch count (the shipped config continues the tuned model)
    job = TrainingJob(make_config(log_path, **TUNING, **{"train.refit_epochs": 0}), str(tmp_path), "tuned")
    job.run()
    holdout = job.stages.summary("prepare")["tuning"]
    train = pd.read_parquet(job.paths.train_data)
    tuning_train = pd.read_parquet(prepare.tuning_data(job.paths, "train"))
    validation = pd.read_parquet(prepare.tuning_data(job.paths, "validation"))
    assert holdout["validation_interactions"] == len(validation) == train["user_id"].nunique()  # one per user
    assert _rows(pd.concat([tuning_train, validation])) == _rows(train)  # a split of train: test never enters
    last = train.sort_values("timestamp", kind="stable").groupby("user_id").tail(1)
    assert _rows(last) == _rows(validation)
    summary = job.stages.summary("train")
    tuned = summary["tuning"]
    assert summary["refit"] and tuned["best_epoch"] is not None and "val_recall" in tuned["history"]
    assert (summary["best_epoch"], summary["best_metric"]) == (tuned["best_epoch"], tuned["best_metric"])  # not None
    assert "val_recall" not in summary["history"] and len(summary["history"]["loss"]) == tuned["best_epoch"]
    examples = job.stages.summary("prepare")["examples"]["count"]
    assert summary["steps"] == tuned["best_epoch"] * math.ceil(examples / 256)
    # the public pieces an experiment reuses: the tuned model scores its best epoch's metric again
    run = tuning.TrainingRun(job.config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    assert run.data.holdout == holdout and not run.data.is_set and not run.data.streamed
    score = tuning.validation_fn(run, tuning.tuned_model(run), *run.vocabularies(), tuning=True)
    assert score() == pytest.approx(tuned["best_metric"], abs=1e-6)


def test_sets_hold_out_a_random_share_and_a_given_validation_file_turns_it_off(log_path, tmp_path):
    sets = {**TUNING, "data.order": "none", "data.split": "random", "train.validation_fraction": 0.25,
            "train.refit": False, "train.epochs": 2}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "sets")
    job.run()
    train = pd.read_parquet(job.paths.train_data)
    expected = (train.groupby("user_id").size() * 0.25).astype(int).clip(upper=train.groupby("user_id").size() - 1)
    assert job.stages.summary("prepare")["tuning"]["validation_interactions"] == expected.sum()
    summary = job.stages.summary("train")
    assert summary["refit"] is False and summary["steps"] == summary["tuning"]["steps"]

    config = make_config(log_path, **{**TUNING, "data.validation": True})
    assert handoff.tuning_fraction(config) == 0.0  # leave_last_n's own validation part is used instead
    assert handoff.tuning_fraction(make_config(log_path, **{**TUNING, "train.early_stopping_patience": 0})) == 0.0


def _model_weights(directory) -> dict:
    """The model's variables (not the optimizer's, nor the loss tracker's) in the newest checkpoint of ``directory``."""
    path = tf.train.latest_checkpoint(str(directory))
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(path)
            if name.startswith("model/") and "OPTIMIZER_SLOT" not in name and "tracker" not in name}


def test_the_large_catalogue_schedule_replaces_its_namesakes_from_its_size_on(log_path):
    config = make_config(log_path, **{**TUNING, "train.large_catalogue_items": 100})
    assert tuning.for_catalogue(config, 99) == (config, None)
    effective, note = tuning.for_catalogue(config, 100)
    large = config.train.large_catalogue
    assert sorted(large) == ["early_stopping_patience", "epochs", "eval_max_users", "min_learning_rate_ratio",
                             "refit_epochs", "teacher_probe_epochs"]
    assert {key: effective.train[key] for key in large} == large.to_dict()
    assert effective.train.epochs == 12 != config.train.epochs == 6  # the given config is left as it was
    assert note.startswith("large catalogue (100 items >= train.large_catalogue_items 100): train.")
    assert "train.epochs=12" in note and f"train.refit_epochs={large.refit_epochs}" in note
    assert effective.model == config.model and effective.train.batch_size == config.train.batch_size
    never = make_config(log_path, **{**TUNING, "train.large_catalogue_items": 0})
    assert tuning.for_catalogue(never, 10**9) == (never, None)


def test_a_warm_refit_continues_from_the_tuned_weights_at_the_learning_rate_of_the_best_epoch(log_path, tmp_path):
    # One epoch, the cap: the best epoch ends the cosine, where its learning rate is 0, so a refit that starts from
    # the tuned weights ends on them exactly; one that started afresh (or anywhere else) would not. The schedule comes
    # from train.large_catalogue (every catalogue is large from 1 item on), over the configured 6 epochs.
    large = {"train.large_catalogue_items": 1, "train.large_catalogue.epochs": 1, "train.large_catalogue.refit_epochs": 1,
             "train.large_catalogue.min_learning_rate_ratio": 0.0, "train.large_catalogue.eval_max_users": 0,
             "train.large_catalogue.early_stopping_patience": 2}
    job = TrainingJob(make_config(log_path, **TUNING, **large), str(tmp_path), "warm")
    job.run()
    summary = job.stages.summary("train")
    assert summary["schedule"].startswith("large catalogue (") and "train.refit_epochs=1" in summary["schedule"]
    tuned = summary["tuning"]
    assert summary["refit"] and tuned["best_epoch"] == 1 and tuned["best_learning_rate"] == 0.0
    examples = job.stages.summary("prepare")["examples"]["count"]
    assert len(summary["history"]["loss"]) == 1 and summary["steps"] == math.ceil(examples / 256)
    refit, tuned = _model_weights(job.paths.checkpoints), _model_weights(job.paths.checkpoints / "tuning")
    assert refit.keys() == tuned.keys() and any("embeddings" in name for name in refit)
    log_q = next(name for name in refit if "static_log_q" in name)
    for name, value in refit.items():
        if name != log_q:
            np.testing.assert_array_equal(value, tuned[name], err_msg=name)
    # log-Q is the counts' of each phase: the tuning part's while tuning, all the training data's in the refit
    run = tuning.TrainingRun(job.config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    item_vocab = run.vocabularies()[0]
    held = pd.read_parquet(prepare.tuning_data(job.paths, "train"))["item_id"].value_counts()
    expected = np.zeros(item_vocab.size, np.int64)
    expected[item_vocab.lookup(held.index)] = held.to_numpy()
    np.testing.assert_array_equal(tuning.tuning_vocabulary(run, item_vocab).counts, expected)
    assert (expected != item_vocab.counts).any()
    np.testing.assert_allclose(tuned[log_q], static_log_q(expected), rtol=1e-6)
    np.testing.assert_allclose(refit[log_q], static_log_q(item_vocab.counts), rtol=1e-6)


def test_the_tuning_record_keeps_the_schedules_learning_rate_at_the_best_epoch(log_path, tmp_path):
    config = make_config(log_path, **{**TUNING, "train.refit_epochs": 2, "train.min_learning_rate_ratio": 0.5})
    job = TrainingJob(config, str(tmp_path), "warm2")
    job.run()
    summary = job.stages.summary("train")
    tuned = summary["tuning"]
    steps_per_epoch = math.ceil(len(prepare.load_examples(job.paths, True, config.model.max_history,
                                                      config.data.history_keep, tuning=True)) / 256)
    expected = training.learning_rate_at(config.train, config.train.epochs * steps_per_epoch,
                                         tuned["best_epoch"] * steps_per_epoch)
    assert tuned["best_learning_rate"] == expected > 0
    examples = job.stages.summary("prepare")["examples"]["count"]
    assert len(summary["history"]["loss"]) == 2 and summary["steps"] == 2 * math.ceil(examples / 256)


def test_a_time_budget_tunes_the_baselines_first_and_sets_the_epochs_from_the_first_one(log_path, tmp_path):
    """train.time_budget_s: the baselines are tuned before training (their record is there when training starts),
    and the tuning phase's length is the plan made after its first epoch; with no time left for a refit from
    scratch, the tuned towers are the final model (a refit cut to what is left would end worse than them)."""
    from retrieval.evaluation import runs

    planned = []
    original = training.PlanEpochs.on_epoch_end

    def spy(self, epoch, logs=None):
        original(self, epoch, logs)
        planned.append(self.epochs)
        assert (job.paths.root / runs.TUNING_RECORD).exists()  # tuned before training

    budgeted = {**TUNING, "train.time_budget_s": 1e-3, "train.refit_epochs": 0, "eval.baselines": ["most_popular",
                                                                                                     "item_knn"]}
    job = TrainingJob(make_config(log_path, **budgeted), str(tmp_path), "budgeted")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training.PlanEpochs, "on_epoch_end", spy)
        job.run()
    assert planned and planned[0] == 1  # a budget already spent: the epoch done, no more
    tuned = job.stages.summary("train")["tuning"]
    assert tuned["best_epoch"] == 1 and len(tuned["history"]["loss"]) == 1
    record = job.paths.checkpoints / "tuning" / training.PLAN_RECORD
    assert record.exists()
    summary = job.stages.summary("train")
    assert not summary["refit"] and tuned["refit_skipped"].startswith("the time budget has 0 s left, under the")
    assert not any(job.paths.checkpoints.glob("ckpt*"))  # no refit began
    assert "the refit was skipped (the time budget has 0 s left" in job.paths.report.read_text()


def test_a_budget_that_holds_the_refit_from_scratch_runs_its_tuned_length_unplanned(log_path, tmp_path):
    """A refit from scratch that fits the time left trains the tuning's best epoch count, with no plan of its own
    (only a warm refit is cut to what is left)."""
    budgeted = {**TUNING, "train.time_budget_s": 3600.0, "train.refit_epochs": 0, "eval.baselines": ["most_popular"]}
    job = TrainingJob(make_config(log_path, **budgeted), str(tmp_path), "budgeted")
    job.run()
    summary = job.stages.summary("train")
    assert summary["refit"] and "refit_skipped" not in summary["tuning"]
    assert len(summary["history"]["loss"]) == summary["tuning"]["best_epoch"]
    assert not (job.paths.checkpoints / training.PLAN_RECORD).exists()


def test_a_budget_spent_cuts_the_warm_refit_to_one_epoch(log_path, tmp_path):
    """A warm refit of train.refit_epochs plans its own epochs too: with the budget already spent (a slower box
    than the plan's), it trains the one epoch it has done instead of its configured two, and records the plan so that
    a resumed refit keeps it."""
    budgeted = {**TUNING, "train.time_budget_s": 1e-3, "train.refit_epochs": 2, "eval.baselines": ["most_popular"]}
    job = TrainingJob(make_config(log_path, **budgeted), str(tmp_path), "budgeted")
    job.run()
    summary = job.stages.summary("train")
    assert summary["refit"] and len(summary["history"]["loss"]) == 1
    examples = job.stages.summary("prepare")["examples"]["count"]
    assert summary["steps"] == math.ceil(examples / 256)  # the warm refit's one epoch (its own optimizer steps)
    assert (job.paths.checkpoints / training.PLAN_RECORD).exists()


def test_early_stopping_in_tuning_ranks_the_items_warm_in_the_tuning_part(log_path, tmp_path, monkeypatch):
    """An item clicked only in the automatic holdout is cold to the tuning model (its counts are the tuning
    part's), so early stopping leaves it out as the headline leaves out items without training clicks."""
    from retrieval.evaluation import early_stopping

    sets = {**TUNING, "data.order": "none", "data.split": "random", "train.validation_fraction": 0.25,
            "train.refit": False, "train.epochs": 1}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "sets")
    job.run()
    run = tuning.TrainingRun(job.config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    seen = {}
    monkeypatch.setattr(early_stopping, "recall_fn", lambda model, train, validation, item_vocab, *a, **k:
                        seen.setdefault("vocab", item_vocab))
    item_vocab, user_vocab = run.vocabularies()
    # One validation item's clicks made the holdout's alone (the tuning part loses its other clicks).
    tuning_train = prepare.tuning_data(job.paths, "train")
    only = pd.read_parquet(prepare.tuning_data(job.paths, "validation"))["item_id"].iloc[0]
    frame = pd.read_parquet(tuning_train)
    frame[frame["item_id"] != only].to_parquet(tuning_train)
    tuning.validation_fn(run, None, item_vocab, user_vocab, tuning=True)
    tuned = tuning.tuning_vocabulary(run, item_vocab)
    index = item_vocab.lookup(np.array([only]))[0]
    assert item_vocab.warm[index] and not tuned.warm[index]
    np.testing.assert_array_equal(seen["vocab"].warm, tuned.warm)
    np.testing.assert_array_equal(seen["vocab"].ids, item_vocab.ids)


@pytest.mark.parametrize("rp3beta", [1.0, 0.0])
def test_the_teacher_is_tried_only_where_rp3beta_leads_and_kept_only_where_it_wins(log_path, tmp_path, monkeypatch,
                                                                                    rp3beta):
    """train.teacher_when = "item_item_leads": a second tuning with the teacher only when the tuned RP3beta's
    holdout recall is above the towers' best; the better variant is recorded, and the refit continues its weights."""
    monkeypatch.setattr(tuning, "_teacher_validation", lambda run: rp3beta)
    sets = {**TUNING, "data.order": "none", "data.split": "random", "train.validation_fraction": 0.25,
            "train.epochs": 2, "train.refit_epochs": 1, "train.teacher_items": 2,
            "train.teacher_when": "item_item_leads", "train.teacher_variant": "user_ids"}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "taught")
    job.run()
    record = job.stages.summary("train")["tuning"]
    taught = job.paths.checkpoints / "tuning" / tuning.TEACHER_DIR
    if rp3beta == 0.0:  # the towers lead: no second tuning, no teacher
        assert "teacher_trial" not in record and not record["teacher"] and not taught.exists()
        return
    trial = record["teacher_trial"]
    assert trial["teacher"] == "rp3beta" and trial["teacher_metric"] == 1.0 and taught.joinpath("variant.json").exists()
    assert trial["kept"] == (trial["with"] > trial["without"]) == record["teacher"]
    assert record["best_metric"] == max(trial["with"], trial["without"])
    assert trial["variant"] == "user_ids" and record["variant"] == ("user_ids" if trial["kept"] else None)
    run = tuning.TrainingRun(job.config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    assert tuning._latest_tuning_checkpoint(run).startswith(str(taught if trial["kept"] else taught.parent))
    model = tuning.final_model(run)  # the refit follows the choice: a user-id table only with the teacher kept
    assert any("user_id" in weight.name for weight in model.weights) == trial["kept"]


def test_the_teachers_probe_gives_the_first_tuning_up_where_it_trails_rp3beta_and_keeps_the_teacher(
        log_path, tmp_path, monkeypatch):
    """train.teacher_probe_epochs: the first tuning stops after the probe's epoch when it reads below PROBE_SHARE of
    the tuned RP3beta, and the towers tuned with the teacher are kept without a comparison with the cut tuning."""
    monkeypatch.setattr(tuning, "_teacher_validation", lambda run: 1.0)  # out of the towers' reach
    sets = {**TUNING, "data.order": "none", "data.split": "random", "train.validation_fraction": 0.25,
            "train.epochs": 3, "train.refit": False, "train.teacher_items": 2, "train.teacher_weighting": "score",
            "train.teacher_when": "item_item_leads", "train.teacher_probe_epochs": 1}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "probed")
    job.run()
    record = job.stages.summary("train")["tuning"]
    cut = artifacts.read_json(job.paths.checkpoints / "tuning" / "variant.json")
    assert len(cut["history"]["val_recall"]) == 1 and cut["history"]["val_recall"][0] < tuning.PROBE_SHARE
    trial = record["teacher_trial"]
    assert trial["probe"] == {"epoch": 1, "floor": tuning.PROBE_SHARE, "gave_up": True}
    assert trial["kept"] and record["teacher"] and record["checkpoints"] == tuning.TEACHER_DIR
    assert len(record["history"]["val_recall"]) > 1  # the teacher's tuning is a whole one


def test_a_variant_is_tuned_on_the_same_holdout_and_kept_only_where_it_reads_clearly_higher(log_path, tmp_path):
    """train.variants: the towers are tuned again with the variant's config in their own directory; the record says
    what each read and which was kept; the refit and the export follow the kept one (its config and checkpoints)."""
    from retrieval.jobs import variants

    sets = {**TUNING, "train.epochs": 2, "train.refit_epochs": 1, "train.variants": ("softer",)}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "variants")
    job.run()
    record = job.stages.summary("train")["tuning"]
    directory = job.paths.checkpoints / "tuning" / "softer"
    trial, = record["variant_trials"]
    configured = artifacts.read_json(job.paths.checkpoints / "tuning" / "variant.json")["best_metric"]
    assert trial["tried"] and trial["metric"] == artifacts.read_json(directory / "variant.json")["best_metric"]
    margin = 1.0 + job.config.train.variant_min_gain  # a near tie keeps the configured towers
    assert trial["kept"] == (trial["metric"] > configured * margin) == (record["variant"] == "softer")
    assert record["best_metric"] == (trial["metric"] if trial["kept"] else configured)
    run = tuning.TrainingRun(job.config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    choice = tuning._choice(run)
    assert choice.variant == record["variant"]
    assert tuning._latest_tuning_checkpoint(run).startswith(str(directory if trial["kept"] else directory.parent))
    assert variants.apply(run.config, "softer").model.temperature == 2 * run.config.model.temperature
    assert "## Towers chosen on the holdout" in job.paths.report.read_text()


def test_a_variant_is_not_tried_where_the_first_tuning_was_over_its_budget(log_path, tmp_path):
    sets = {**TUNING, "train.epochs": 1, "train.variants": ("softer",), "train.variant_max_examples": 0}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "over")
    job.run()
    record = job.stages.summary("train")["tuning"]
    trial, = record["variant_trials"]
    assert not trial["tried"] and "more than train.variant_max_examples = 0" in trial["reason"] and record["variant"] is None
    assert not (job.paths.checkpoints / "tuning" / "softer").exists()
    assert f"variant softer not tried ({trial['reason']})" in job.paths.report.read_text()


def test_a_variant_is_not_tried_where_the_time_budget_cannot_hold_it(log_path, tmp_path):
    """With the budget spent, a variant would overrun it by two epochs and the kept towers' refit: not tried, said
    so; the configured towers are refit as planned."""
    sets = {**TUNING, "train.epochs": 2, "train.variants": ("softer",), "train.time_budget_s": 1e-3,
            "eval.baselines": ["most_popular"]}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "spent")
    job.run()
    record = job.stages.summary("train")["tuning"]
    trial, = record["variant_trials"]
    assert not trial["tried"] and record["variant"] is None
    assert trial["reason"].startswith("the time budget has 0 s left, under the ") and "refit" in trial["reason"]
    assert not (job.paths.checkpoints / "tuning" / "softer").exists()


def test_the_variants_budget_floor_is_two_epochs_at_the_first_pace_and_the_kept_refit(monkeypatch):
    """``_budget_short``: two epochs of the first tuning (seconds over its epochs) plus the kept towers' refit (their
    best epoch count at their pace, scaled to all training data; train.refit_epochs when set)."""
    import ml_collections

    from retrieval.jobs import budget as budget_lib

    config = ml_collections.ConfigDict({"train": {"refit": True, "refit_epochs": 0, "validation_fraction": 0.2}})
    first = {"seconds": 40.0, "history": {"loss": [1.0] * 4}}  # 10 s an epoch
    kept = {"seconds": 90.0, "history": {"loss": [1.0] * 6}, "best_epoch": 4}  # 15 s an epoch: refit 4 x 15 / 0.8
    need = 2 * 10.0 + 4 * 15.0 / 0.8

    def run(left: float):
        budget = budget_lib.TimeBudget(deadline=100.0 + left, reserve_s=100.0, clock=lambda: 0.0)
        return tuning.TrainingRun(config, None, None, budget=budget)

    assert tuning._budget_short(run(need), first, kept) is None
    assert tuning._budget_short(run(need - 1.0), first, kept) == (
        f"the time budget has {need - 1.0:.0f} s left, under the {need:.0f} s of two epochs and the refit of the "
        "towers kept")
    config.train.refit_epochs = 1
    assert tuning._budget_short(run(20.0 + 15.0 / 0.8), first, kept) is None
    config.train.refit = False
    assert tuning._budget_short(run(20.0), first, kept) is None and tuning._budget_short(run(19.0), first, kept)
    assert tuning._budget_short(tuning.TrainingRun(config, None, None), first, kept) is None  # no budget


def test_after_a_sampled_sequence_holdout_the_self_attentive_variant_trains_to_its_last_epoch_and_is_final(log_path,
                                                                                                         tmp_path):
    """train.sequence_holdout_users below the log's users: the holdout is the last item of that many of them, the
    variant reads its holdout every epoch without stopping early, and when kept it is the final model (no refit)."""
    sampled = {**TUNING, "train.epochs": 1, "train.variants": ("self_attention",), "train.sequence_holdout_users": 100}
    job = TrainingJob(make_config(log_path, **sampled), str(tmp_path), "sampled")
    job.run()
    holdout = job.stages.summary("prepare")["tuning"]
    assert holdout["sampled_users"] and holdout["validation_interactions"] == 100
    variant = artifacts.read_json(job.paths.checkpoints / "tuning" / "self_attention" / "variant.json")
    assert not variant["stopped_early"] and len(variant["history"]["val_recall"]) == len(variant["history"]["loss"])
    summary = job.stages.summary("train")  # kept on this log (0.37 against 0.27): the tuned variant is final
    assert summary["tuning"]["variant"] == "self_attention" and not summary["refit"]
    assert summary["steps"] == variant["steps"] and summary["best_metric"] == variant["history"]["val_recall"][-1]


def test_the_self_attentive_variant_trains_one_example_per_user_on_sequences_and_is_not_tried_on_sets(log_path,
                                                                                                      tmp_path):
    """The "self_attention" variant (retrieval/jobs/variants.py) on a sequence log: tuned in its own directory on the
    most recent example of each user (its data.max_examples_per_user=1 over examples prepared without a cap), its
    curve on the same holdout; on sets it is not tried, and the record says why."""
    sets = {**TUNING, "train.epochs": 1, "train.refit_epochs": 1, "train.variants": ("self_attention",)}
    job = TrainingJob(make_config(log_path, **sets), str(tmp_path), "sequences")
    job.run()
    trial, = job.stages.summary("train")["tuning"]["variant_trials"]
    assert trial["tried"] and (job.paths.checkpoints / "tuning" / "self_attention" / "variant.json").exists()
    run = tuning.TrainingRun(job.config, job.paths, handoff.PreparedData.read(job.stages.summary("prepare"), job.paths))
    examples = run.data.load_examples(job.paths, job.config, tuning=True)
    recent = examples.most_recent(1)
    assert len(recent) == len(np.unique(examples.arrays["user"])) < len(examples)
    # each user's last training interaction of the tuning part (the examples were written shuffled)
    item_vocab, user_vocab = run.vocabularies()
    table = pd.read_parquet(prepare.tuning_data(job.paths, "train")).sort_values(["user_id", "timestamp"],
                                                                              kind="stable")
    last = table.groupby("user_id").tail(1)
    expected = dict(zip(user_vocab.lookup(last["user_id"].to_numpy()).tolist(),
                        item_vocab.lookup(last["item_id"].to_numpy()).tolist(), strict=True))
    assert dict(zip(recent.arrays["user"].tolist(), recent.arrays["label"].tolist(), strict=True)) == expected

    job = TrainingJob(make_config(log_path, **sets, **{"data.order": "none", "data.split": "random"}), str(tmp_path),
                      "sets")
    job.run()
    trial, = job.stages.summary("train")["tuning"]["variant_trials"]
    assert not trial["tried"] and "sets" in trial["reason"]
    assert not (job.paths.checkpoints / "tuning" / "self_attention").exists()
