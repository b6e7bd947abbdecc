"""Training: schedule, exact resumption from a mid-epoch checkpoint, early stopping, TensorBoard scalars."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import math
import time
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from retrieval import artifacts, training
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError
from retrieval.models import build_model, default_config, layers
from retrieval.settings import TRAIN

N, BATCH = 96, 16  # 6 steps per epoch


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    items = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, 20, 400)])
    users = Vocabulary.from_ids([f"u{k}" for k in range(10)])
    history = rng.integers(2, items.size, (N, 4)).astype(np.int32)
    examples = {"user": rng.integers(2, users.size, N).astype(np.int32), "history": history,
                "history_length": np.full(N, 4, np.int32), "label": ((history[:, 0] + 3) % (items.size - 2) + 2)
                .astype(np.int32)}
    return items, users, examples


def model_config():
    """In-batch softmax with the frequency estimator (its state must survive a resume). No sampled negatives: the
    candidate-sampler ops keep a hidden random state that a checkpoint cannot hold, so only the sampler-free
    objectives resume bit for bit."""
    config = default_config()
    config.embedding_dim, config.item_tower.id_embedding_dim = 6, 6
    config.user_tower.hidden_units = (8,)
    config.objective.log_q = "estimated"
    return config


def train_config(**overrides):
    config = training.default_train_config()
    config.batch_size, config.epochs, config.learning_rate, config.warmup_steps = BATCH, 3, 0.02, 2
    config.log_every_steps, config.checkpoint_every_steps = 4, 4
    config.update(overrides)
    return config


def test_schedule_warms_up_then_follows_the_cosine():
    config = train_config(warmup_steps=10, learning_rate=0.1, min_learning_rate_ratio=0.1)
    schedule = training.learning_rate(config, total_steps=110)
    for step in [0, 5, 10, 60, 110]:
        if step <= 10:
            expected = 0.1 * step / 10
        else:
            expected = 0.1 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - 10) / 100)))
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)
    constant = training.learning_rate(train_config(schedule="constant", warmup_steps=0, learning_rate=0.3), 100)
    assert constant == 0.3
    warm = training.learning_rate(train_config(schedule="constant", warmup_steps=4, learning_rate=0.3), 100)
    assert [float(warm(s)) for s in (2, 4, 50, 100)] == pytest.approx([0.15, 0.3, 0.3, 0.3], rel=1e-6)
    for bad, key in ((train_config(schedule="step"), "train.schedule"), (train_config(optimizer="sgd"), "train.optimizer")):
        with pytest.raises(InputError, match=key):  # what training.fit checks first, as the pipelines do
            TRAIN.check(bad)


def test_learning_rate_at_is_the_schedule_at_that_step():
    config = train_config(warmup_steps=10, learning_rate=0.1, min_learning_rate_ratio=0.0)
    assert training.learning_rate_at(config, 110, 60) == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 0.5)),
                                                                        rel=1e-5)
    assert training.learning_rate_at(config, 110, 110) == pytest.approx(0.0, abs=1e-9)
    constant = train_config(schedule="constant", warmup_steps=0, learning_rate=0.3)
    assert training.learning_rate_at(constant, 100, 50) == 0.3


def training_state(model):
    """What a resumed run must reproduce: the trainable weights and the frequency estimator (not the metrics)."""
    return [*model.trainable_variables, *model.objective.estimator.weights]


def test_resume_from_a_mid_epoch_checkpoint_reproduces_the_uninterrupted_run(data, tmp_path):
    items, users, examples = data
    full = build_model(model_config(), items, users)
    result = training.fit(full, examples, train_config(), checkpoint_dir=tmp_path / "full")
    assert result.step == 3 * 6

    def crash():
        raise KeyboardInterrupt  # after epoch 1 (step 6); the last checkpoint is at step 4, mid-epoch

    interrupted = build_model(model_config(), items, users)
    with pytest.raises(KeyboardInterrupt):
        training.fit(interrupted, examples, train_config(), checkpoint_dir=tmp_path / "resumed", evaluate_fn=crash)
    assert tf.train.latest_checkpoint(tmp_path / "resumed").endswith("ckpt-4")
    resumed = build_model(model_config(), items, users)
    result = training.fit(resumed, examples, train_config(), checkpoint_dir=tmp_path / "resumed")
    assert result.step == 18
    assert int(resumed.objective.estimator.step) == 18
    for a, b in zip(training_state(full), training_state(resumed), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    again = build_model(model_config(), items, users)
    assert training.fit(again, examples, train_config(), checkpoint_dir=tmp_path / "resumed").history == {}


def test_early_stopping_restores_and_checkpoints_the_best_weights(data, tmp_path):
    items, users, examples = data
    model = build_model(model_config(), items, users)
    snapshots, scores = [], iter([0.3, 0.5, 0.4, 0.2, 0.1])

    def evaluate():
        snapshots.append(model.get_weights())
        return next(scores)

    config = train_config(epochs=5, early_stopping_patience=2, optimizer="adagrad")
    result = training.fit(model, examples, config, checkpoint_dir=tmp_path / "ckpt", evaluate_fn=evaluate,
                          validation_examples=examples)
    assert result.stopped_early and result.best_metric == 0.5 and result.best_epoch == 2 and len(snapshots) == 4
    assert result.history["val_recall"] == [0.3, 0.5, 0.4, 0.2] and "val_loss" in result.history
    for a, b in zip(model.get_weights(), snapshots[1], strict=True):
        np.testing.assert_array_equal(a, b)
    restored = build_model(model_config(), items, users)
    checkpoint = tf.train.Checkpoint(model=restored)
    restored(dict((k, v[:2]) for k, v in examples.items()))
    restored.item_vectors(tf.constant([2]))
    checkpoint.restore(tf.train.latest_checkpoint(tmp_path / "ckpt")).expect_partial()
    for a, b in zip(restored.get_weights(), snapshots[1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_run_killed_mid_tuning_stops_and_keeps_what_the_uninterrupted_run_does(data, tmp_path):
    """Early stopping's state (scores, best epoch, best weights) resumes with the run: the same best epoch, the same
    restored weights, the whole curve in the history (a resumed run used to start counting again)."""
    items, users, examples = data
    curve = [0.3, 0.5, 0.4, 0.2, 0.1, 0.0]  # by epoch: best at 2, patience 2 stops after epoch 4

    def run(directory, crash_at=None):
        model = build_model(model_config(), items, users)

        def evaluate():
            epoch = int(model.optimizer.iterations.numpy()) // 6  # 6 steps per epoch
            if epoch == crash_at:
                raise KeyboardInterrupt  # as a kill -9 after the epoch's steps, before its evaluation
            return curve[epoch - 1]

        config = train_config(epochs=6, early_stopping_patience=2, optimizer="adam", sparse_updates="on")
        return model, training.fit(model, examples, config, checkpoint_dir=directory, evaluate_fn=evaluate)

    full, expected = run(tmp_path / "full")
    assert expected.best_epoch == 2 and expected.stopped_early
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", crash_at=3)
    resumed, result = run(tmp_path / "killed")
    assert (result.best_epoch, result.best_metric, result.stopped_early) == (2, 0.5, True)
    assert result.history["val_recall"] == expected.history["val_recall"] == [0.3, 0.5, 0.4, 0.2]
    for a, b in zip(full.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("floor, epochs", [(0.45, 2), (0.35, 5)])
def test_a_probe_stops_after_its_epoch_below_its_floor_and_a_resumed_run_on_the_same_score(data, tmp_path, floor,
                                                                                          epochs):
    """stop_below (the teacher's probe): the run stops after epoch 2 when epoch 2 read below the floor, else trains
    on; killed after epoch 2's checkpoint before the probe looked, a resumed run stops at its next epoch's end on
    epoch 2's kept score."""
    items, users, examples = data
    curve = [0.3, 0.4, 0.5, 0.6, 0.7]

    def run(directory, crash_at=None, probe=True):
        model = build_model(model_config(), items, users)

        def evaluate():
            epoch = int(model.optimizer.iterations.numpy()) // 6  # 6 steps per epoch
            if epoch == crash_at:
                raise KeyboardInterrupt  # after epoch 2's checkpoint, before epoch 3's evaluation
            return curve[epoch - 1]

        config = train_config(epochs=5, early_stopping_patience=3)
        return training.fit(model, examples, config, checkpoint_dir=directory, evaluate_fn=evaluate,
                            stop_below=training.StopBelow(2, floor) if probe else None)

    result = run(tmp_path / "full")
    assert result.history["val_recall"] == curve[:epochs] and result.step == 6 * epochs
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", crash_at=3, probe=False)
    resumed = run(tmp_path / "killed")
    assert resumed.history["val_recall"][:2] == curve[:2]
    assert len(resumed.history["val_recall"]) == (3 if epochs == 2 else 5)  # one epoch past the probe at most


def test_the_epochs_inside_the_warmup_are_not_watched_by_early_stopping_nor_after_a_resume(data, tmp_path):
    """Warmup 12 steps at 6 steps per epoch: epochs 1-2 end inside it (Keras's start_from_epoch=2), so their scores
    are recorded but neither the best nor the patience (without the rule the first epoch's 0.6 would be kept and
    training stopped after epoch 3); a run killed before epoch 3's evaluation and resumed (replaying epochs 1-2)
    stops and keeps the same."""
    from types import SimpleNamespace

    items, users, examples = data
    curve = [0.6, 0.1, 0.3, 0.5, 0.4, 0.2, 0.1, 0.0]

    def run(directory, crash_at=None):
        model = build_model(model_config(), items, users)

        def evaluate():
            epoch = int(model.optimizer.iterations.numpy()) // 6
            if epoch == crash_at:
                raise KeyboardInterrupt
            return curve[epoch - 1]

        config = train_config(epochs=8, early_stopping_patience=2, warmup_steps=12, optimizer="adam")
        return training.fit(model, examples, config, checkpoint_dir=directory, evaluate_fn=evaluate)

    expected = run(tmp_path / "full")
    assert (expected.best_epoch, expected.best_metric, expected.stopped_early) == (4, 0.5, True)
    assert expected.history["val_recall"] == curve[:6]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", crash_at=3)
    result = run(tmp_path / "killed")
    assert (result.best_epoch, result.best_metric, result.history["val_recall"]) == (4, 0.5, curve[:6])
    assert training.progress_line(2, 8, {"epoch_val_recall": 0.1}, SimpleNamespace(
        monitor="val_recall", best=-np.inf, start_from_epoch=2, patience=2, wait=0), 0.1, 6) == (
        "epoch 2/8  val_recall 0.1000  (warming up)  ETA 0m02s; stops by epoch 5 unless it improves")


def test_training_learns_and_logs_tensorboard_scalars(data, tmp_path):
    items, users, examples = data
    model = build_model(model_config(), items, users)
    result = training.fit(model, examples, train_config(epochs=6, weight_decay=1e-4), tensorboard_dir=tmp_path / "tb")
    assert result.history["loss"][-1] < result.history["loss"][0]
    tags = set()
    for path in (tmp_path / "tb").iterdir():
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            tags.update(value.tag for value in event.summary.value)
    assert {"loss", "learning_rate", "examples_per_second", "epoch_loss"} <= tags


def test_jit_compile_auto_is_on_exactly_for_sampler_free_objectives_on_one_replica(data):
    items, users, _ = data
    in_batch = build_model(model_config(), items, users)
    assert training.use_jit_compile(train_config(), in_batch)
    assert not training.use_jit_compile(train_config(jit_compile="off"), in_batch)
    sampled = model_config()
    sampled.objective.name, sampled.objective.num_negatives = "sampled_softmax", 8
    assert not training.use_jit_compile(train_config(), build_model(sampled, items, users))
    mixed = model_config()
    mixed.objective.num_negatives = 8  # in-batch plus sampled negatives
    assert not training.use_jit_compile(train_config(), build_model(mixed, items, users))
    assert training.use_jit_compile(train_config(jit_compile="on"), build_model(mixed, items, users))
    with pytest.raises(InputError, match="train.jit_compile"):
        TRAIN.check(train_config(jit_compile="yes"))


@pytest.mark.parametrize("objective, log_q", [("in_batch", "estimated"), ("full_softmax", "none")])
def test_xla_step_with_dense_embedding_gradients_equals_the_sparse_step(data, objective, log_q):
    """The XLA-compiled step sums the embedding row gradients densely and pools the history in chunks
    (``layers.sum_over_positions``); Keras's uncompiled step de-duplicates the rows and pools with one reduction.
    Both must move every variable (and the frequency estimator) the same way."""
    items, users, examples = data
    config = model_config()
    config.objective.name, config.objective.log_q = objective, log_q
    states = {}
    for jit in ("on", "off"):
        model = build_model(config, items, users)
        with mock.patch.object(layers, "sum_over_positions", wraps=layers.sum_over_positions) as chunked:
            training.fit(model, examples, train_config(epochs=1, jit_compile=jit))
        assert model.jit_compile == (jit == "on")
        assert chunked.called == (jit == "on") and not model.user_tower.chunked_pooling
        states[jit] = [v.numpy() for v in model.weights]
    assert len(states["on"]) == len(states["off"])
    for compiled, eager in zip(states["on"], states["off"], strict=True):
        np.testing.assert_allclose(compiled, eager, rtol=1e-4, atol=1e-5)


def test_several_steps_per_execution_train_the_same_steps_and_weights(data, tmp_path):
    """``train.steps_per_execution`` changes how many steps run per call into TensorFlow, not the steps: 6 per
    epoch in executions of 4 and 2 end at the same weights and step as one at a time, and callbacks still fire at
    the first step reaching their multiple."""
    items, users, examples = data
    states, steps = {}, {}
    for per_call in (1, 4):
        model = build_model(model_config(), items, users)
        result = training.fit(model, examples, train_config(steps_per_execution=per_call, keep_checkpoints=10),
                              checkpoint_dir=tmp_path / str(per_call))
        states[per_call], steps[per_call] = [v.numpy() for v in training_state(model)], result.step
        checkpoints = sorted(int(path.name.split("-")[1].split(".")[0]) for path in (tmp_path / str(per_call)).glob(
            "ckpt-*.index"))
        assert checkpoints == ([4, 8, 12, 16, 18] if per_call == 1 else [4, 10, 12, 16, 18])  # executions end at
        # 4, 6 | 10, 12 | 16, 18 (4 steps, then the epoch's 2 left): a checkpoint where one crosses a multiple of 4
    assert steps[1] == steps[4] == 18
    for one, four in zip(states[1], states[4], strict=True):
        np.testing.assert_allclose(one, four, rtol=1e-5, atol=1e-6)


def test_steps_per_execution_divides_the_callback_periods_and_is_one_mid_epoch():
    strategy = tf.distribute.get_strategy()
    assert training.steps_per_execution(train_config(steps_per_execution=4), strategy, 0, 6) == 4
    assert training.steps_per_execution(train_config(steps_per_execution=4, log_every_steps=6), strategy, 12, 6) == 2
    assert training.steps_per_execution(train_config(steps_per_execution=8, checkpoint_every_steps=1), strategy, 0,
                                        6) == 1
    assert training.steps_per_execution(train_config(steps_per_execution=4), strategy, 4, 6) == 1  # resumed mid-epoch


def test_the_epoch_line_has_real_totals_the_best_and_an_eta_bounded_by_patience():
    from types import SimpleNamespace

    early = SimpleNamespace(monitor="val_recall", best=0.2793, best_epoch=1, patience=8, wait=1)  # best: epoch 2
    line = training.progress_line(3, 40, {"epoch_loss": 5.32951, "epoch_val_recall": 0.27467}, early, 0.05, 138)
    assert line == ("epoch 3/40  loss 5.3295  val_recall 0.2747  best 0.2793 at epoch 2  ETA 0m48s; stops by epoch 10 "
                    "unless it improves")  # 7 epochs of 138 steps at 0.05 s
    assert training.progress_line(39, 40, {"epoch_loss": 1.0}, None, 0.05, 138) == "epoch 39/40  loss 1.0000  ETA 0m07s"
    assert training.progress_line(1, 40, {"epoch_loss": 1.0}, None, None, 4) == (
        "epoch 1/40  loss 1.0000  ETA after the next epoch (the first steps compile)")


def test_the_eta_clock_starts_after_the_first_execution(monkeypatch):
    """A first execution that compiles for 30 s and steps of 0.1 s after it: the ETA reads the steps, not the
    compilation (which made a short run's first ETA 3x too high)."""
    now = [0.0]
    monkeypatch.setattr(training.time, "perf_counter", lambda: now[0])
    logger = training.ProgressLogger(every_steps=1000, batch_size=8, total_steps=40, steps_per_epoch=4)
    logger.model = mock.Mock()
    logger.model.optimizer.iterations.numpy.return_value = 0
    lines = []
    monkeypatch.setattr(training.logging, "info", lambda fmt, *args: lines.append(fmt % args))
    logger.on_train_begin()
    for epoch in range(2):
        logger.on_epoch_begin(epoch)
        for batch in range(4):
            now[0] += 30.0 if (epoch, batch) == (0, 0) else 0.1
            logger.on_train_batch_end(batch, {"loss": 1.0})
        logger.on_epoch_end(epoch, {"loss": 1.0})
    logger.stop()
    assert lines[-2].endswith("ETA 0m04s")  # 9 epochs x 4 steps x 0.1 s (was 33 s with the compilation)
    assert lines[-1].endswith("ETA 0m03s")


def test_a_planned_run_trains_the_planned_epochs_on_a_cosine_of_their_length_and_resumes_to_them(data, tmp_path):
    """plan_epochs (a time budget) sets the length after the first epoch and again after the second: the run stops
    there, its learning rate from then on is the cosine of the planned length (not of the cap), and a rerun reads the
    decision back."""
    items, users, examples = data
    config = train_config(epochs=5, min_learning_rate_ratio=0.0, steps_per_execution=1)
    seen, rates = [], []

    class Rates(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            optimizer = self.model.optimizer
            rates.append((int(optimizer.iterations.numpy()), float(tf.keras.backend.get_value(optimizer.learning_rate))))

    def plan(measured):
        seen.append(measured)
        return 2

    model = build_model(model_config(), items, users)
    with mock.patch.object(training, "CheckpointEvery", side_effect=lambda *a: Rates()):
        result = training.fit(model, examples, config, checkpoint_dir=tmp_path, evaluate_fn=lambda: 0.5,
                              plan_epochs=plan)
    assert result.step == 2 * 6 and [measured.done for measured in seen] == [1, 2]
    assert seen[0].seconds >= seen[0].validation_seconds > 0
    assert seen[1].compile_seconds == seen[0].compile_seconds  # measured in the first epoch, paid again by a refit
    assert [step for step, _ in rates] == list(range(1, 13))
    # The first epoch ran on the cap's cosine (the plan comes at its end), the rest on the planned one; the optimizer
    # reports the rate its last update used, the schedule's at the step before.
    expected = [training.learning_rate_at(config, 30, step - 1) if step <= 6 else
                training.learning_rate_at(train_config(epochs=2), 12, step - 1) for step, _ in rates]
    assert [rate for _, rate in rates] == pytest.approx(expected, rel=1e-4, abs=1e-7)
    # No early stopping: the weights kept are the last epoch's, and so are the best epoch, its metric and its rate
    # (argmax of this constant metric would name the first).
    assert (result.best_epoch, result.best_metric) == (2, 0.5)
    assert result.best_learning_rate == pytest.approx(training.learning_rate_at(train_config(epochs=2), 12, 12))
    assert artifacts.read_json(tmp_path / training.PLAN_RECORD)["epochs"] == 2
    checkpointed = tmp_path / "checkpointed"  # (the run above kept no checkpoint: its saver was the rate probe)
    training.fit(build_model(model_config(), items, users), examples, config, checkpoint_dir=checkpointed,
                 plan_epochs=lambda _: 2)
    again = build_model(model_config(), items, users)
    resumed = training.fit(again, examples, config, checkpoint_dir=checkpointed, plan_epochs=lambda _: 5)
    assert resumed.history == {} and resumed.step == 12  # complete at the recorded length, not re-planned to 5


def test_the_plan_is_clamped_to_the_cap_and_to_the_epochs_done(data):
    items, users, examples = data
    for planned, expected in ((9, 3), (0, 1)):
        model = build_model(model_config(), items, users)
        result = training.fit(model, examples, train_config(epochs=3), plan_epochs=lambda _, e=planned: e)
        assert result.step == expected * 6


def test_the_epoch_lines_of_a_phase_start_with_its_name(monkeypatch):
    logger = training.ProgressLogger(every_steps=1000, batch_size=8, total_steps=8, steps_per_epoch=4,
                                     phase="tuning (softer)")
    logger.model = mock.Mock()
    logger.model.optimizer.iterations.numpy.return_value = 0
    lines = []
    monkeypatch.setattr(training.logging, "info", lambda fmt, *args: lines.append(fmt % args))
    logger.on_train_begin()
    logger.on_epoch_end(0, {"loss": 1.0})
    logger.stop()
    assert lines == ["tuning (softer): epoch 1/2  loss 1.0000  ETA after the next epoch (the first steps compile)"]


def test_no_stretch_of_training_is_silent_longer_than_quiet_s(monkeypatch):
    """The watch thread says what training is doing when no line came for quiet_s: compiling before the first
    step, training between step lines, releasing the input pipeline after the last epoch (30-60 s of silence on a
    loaded machine before it); nothing while lines come, nothing after stop."""
    logger = training.ProgressLogger(every_steps=1000, batch_size=8, total_steps=8, steps_per_epoch=4,
                                     phase="tuning", quiet_s=0.2)
    logger.model = mock.Mock()
    logger.model.optimizer.iterations.numpy.return_value = 0
    lines = []
    monkeypatch.setattr(training.logging, "info", lambda fmt, *args: lines.append(fmt % args))

    def lines_within(seconds: float) -> list[str]:
        start = len(lines)
        time.sleep(seconds)
        return lines[start:]

    logger.on_train_begin()
    assert any(line.startswith("tuning: tracing and compiling the training step, ") for line in lines_within(0.5))
    logger.on_train_batch_end(0, {"loss": 1.0})
    assert any(line.startswith("tuning: training, ") for line in lines_within(0.5))
    logger.on_train_end()
    quiet = lines_within(0.5)
    assert quiet and all(line.startswith("tuning: training done, releasing the input pipeline, ") for line in quiet)
    assert len(quiet) <= 3  # one per quiet_s of silence, not one per check (every quiet_s / 5)
    logger.stop()
    assert lines_within(0.5) == []
