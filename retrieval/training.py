"""Training: Keras ``fit`` over ``tf.data`` with resumable checkpoints, a learning-rate schedule, progress logs,
TensorBoard and optional early stopping on a validation metric.

Resumption: ``fit`` restores the latest checkpoint of ``checkpoint_dir`` (model weights, the frequency
estimator, optimizer slots and the step ``optimizer.iterations``) and continues the *same* stream of batches: the
pipeline is ``shuffle(seed) -> repeat -> batch``, deterministic under the seed, and skips the batches already
trained on. Training ends after exactly ``epochs * steps_per_epoch`` steps whether or not it was interrupted. Keras
epochs after a resume are counted from the resumed step (``initial_epoch = step // steps_per_epoch``); early-stopping
patience restarts with the process.

Distribution: build the model inside ``strategy.scope()`` (``distributed.make_strategy(config.strategy)``); ``fit``
uses the model's strategy. ``batch_size`` is the global batch. Every worker runs ``evaluate_fn`` (so they take the
same early-stopping decision); only the chief writes checkpoints and TensorBoard logs that are kept. Under
``parameter_server`` the chief alone runs ``fit`` and the workers step asynchronously, each on its own batch of
``batch_size`` (``retrieval.parameter_server``).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import summary_pb2

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval import artifacts, checkpoints, distributed, parameter_server, periodic
from retrieval.artifacts import PathLike
from retrieval.data import examples as examples_lib
from retrieval.errors import InputError
from retrieval.models.two_tower import TwoTowerModel
from retrieval.optimizers import CatchUpAdam, LazyAdagrad, LazyRowwiseAdagrad, RowwiseAdagrad
from retrieval.resumable_stopping import ResumableEarlyStopping
from retrieval.settings import SPARSE_UPDATES_MIN_ROWS, TRAIN, default_train_config  # noqa: F401

QUIET_S = 25.0  # the longest stretch of training without a line on stderr (ProgressLogger's watch)
PLAN_RECORD = "planned_epochs.json"  # in a phase's checkpoint directory: the epoch count a time budget set


@dataclasses.dataclass
class FitResult:
    """What ``fit`` did: Keras history (per-epoch logs), the final step, the best validation metric and the epoch
    (1-based, counted from the start of training) that reached it, and the learning rate the schedule gave at the
    end of that epoch (where a refit that continues from the best weights starts: ``learning_rate_at``). Without
    early stopping the weights are the last epoch's, and "best" names that epoch and its metric."""

    history: dict
    step: int
    best_metric: Optional[float] = None
    stopped_early: bool = False
    best_epoch: Optional[int] = None
    best_learning_rate: Optional[float] = None


class _StepCallback(tf.keras.callbacks.Callback):
    """Tracks the optimizer step without reading the variable after every batch: the step at the epoch's start plus
    the batch index Keras reports, which is the execution's last step (``steps_per_execution`` steps per call).
    ``crossed(every)``: whether the last execution reached a multiple of ``every``. Batch logs are passed as they come
    (tensors; ``RemoteValue``s under parameter-server training, which requires this)."""

    def __init__(self):
        super().__init__()
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None):
        self.step = self.previous_step = self._epoch_start = int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.step

    def on_train_batch_end(self, batch, logs=None):
        self.previous_step, self.step = self.step, self._epoch_start + int(batch) + 1

    def crossed(self, every: int) -> bool:
        return self.step // every > self.previous_step // every


class ProgressLogger(_StepCallback):
    """Logs the step, the running loss, the learning rate and the throughput (examples/s) through absl every
    ``every_steps``, and one line per epoch: ``epoch i/N``, the validation metric and the best so far when
    evaluated, and an ETA (``progress_line``); writes them, with every numeric epoch log (``val_loss``, the
    validation metric), as TensorBoard scalars to ``log_dir`` when given. Summaries are written with
    ``tf.summary.write`` and the scalars plugin metadata, so the ``tensorboard`` package is needed only to view
    them. ``early``: the run's early stopping, whose patience bounds the ETA; ``phase`` names the training the
    epoch lines (and their ETA) belong to, where a run trains more than once (tuning, variants, refit).

    No stretch of training is silent for more than ``quiet_s`` seconds: a watch thread says what is going on when no
    line came for that long (the first execution's tracing and compilation, a slow stretch of steps, and the end of
    ``Model.fit``, where releasing the input pipeline took 30-60 s on a loaded machine), until :meth:`stop`."""

    def __init__(self, every_steps: int, batch_size: int, total_steps: int, log_dir: Optional[PathLike] = None,
                 steps_per_epoch: int = 0, early: Optional[tf.keras.callbacks.EarlyStopping] = None, phase: str = "",
                 quiet_s: float = QUIET_S):
        super().__init__()
        self.phase = f"{phase}: " if phase else ""
        self.quiet_s = float(quiet_s)
        self._doing = "tracing and compiling the training step"  # until the first execution ends
        self._watch = periodic.Periodic(self._say_what_is_going_on, max(self.quiet_s / 5, 0.05), "training-watch")
        self.every_steps, self.batch_size, self.total_steps = max(int(every_steps), 1), batch_size, total_steps
        self.steps_per_epoch, self.early = max(int(steps_per_epoch), 1), early
        self.epochs = math.ceil(total_steps / self.steps_per_epoch)
        self._writer = tf.summary.create_file_writer(str(log_dir)) if log_dir is not None else None
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))

    def _write(self, values: Mapping[str, float], step: int) -> None:
        if self._writer is None:
            return
        with self._writer.as_default():
            for tag, value in values.items():
                tf.summary.write(tag, tf.constant(float(value), tf.float32), step=step, metadata=self._metadata)
        self._writer.flush()

    def _say_what_is_going_on(self) -> None:
        quiet = time.monotonic() - self._last_line
        if quiet >= self.quiet_s:
            self._log("%s%s, %.0f s since the last line", self.phase, self._doing, quiet)

    def _log(self, *args) -> None:
        self._last_line = time.monotonic()
        logging.info(*args)

    def stop(self) -> None:
        """Ends the watch thread (``training.fit`` calls it once ``Model.fit`` returned)."""
        self._watch.stop()

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._last_step, self._last_time = self.step, time.perf_counter()
        self._warm: Optional[tuple[int, float]] = None  # step and time at the end of the first execution
        self._last_line = time.monotonic()
        self._watch.start()

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        self._doing = "training done, releasing the input pipeline"

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        step = self.step
        if self._warm is None:  # the ETA's clock starts after the first execution, which traces and compiles
            self._warm = (step, time.perf_counter())
            self._doing = "training"
        if not self.crossed(self.every_steps) and step < self.total_steps:
            return
        now = time.perf_counter()
        if isinstance(logs, tf.distribute.experimental.coordinator.RemoteValue):
            logs = logs.fetch()  # parameter-server training: the step's logs, once it has run
        values = {"loss": float((logs or {}).get("loss", float("nan"))),
                  "learning_rate": float(tf.keras.backend.get_value(self.model.optimizer.learning_rate)),
                  "examples_per_second": (step - self._last_step) * self.batch_size / max(now - self._last_time, 1e-9)}
        self._log("step %d (epoch %d/%d)  loss %.4f  lr %.3g  %.0f examples/s", step,
                  min(step // self.steps_per_epoch + 1, self.epochs), self.epochs, values["loss"],
                  values["learning_rate"], values["examples_per_second"])
        self._write(values, step)
        self._last_step, self._last_time = step, now

    def on_epoch_end(self, epoch, logs=None):
        numeric = {f"epoch_{k}": v for k, v in (logs or {}).items() if isinstance(v, (int, float, np.floating))}
        self._write(numeric, self.step)
        warm_step, warm_time = self._warm if self._warm is not None else (self.step, 0.0)
        seconds_per_step = ((time.perf_counter() - warm_time) / (self.step - warm_step) if self.step > warm_step
                            else None)
        self._log("%s%s", self.phase, progress_line(epoch + 1, self.epochs, numeric, self.early, seconds_per_step,
                                                    self.steps_per_epoch))


def progress_line(epoch: int, epochs: int, logs: Mapping[str, float], early: Optional[tf.keras.callbacks.EarlyStopping],
                  seconds_per_step: Optional[float], steps_per_epoch: int) -> str:
    """``epoch i/N``, the epoch's loss, the validation metric and the best so far, and the time left: to epoch N, or,
    with early stopping, to the epoch where patience runs out if the metric does not improve again (it can only
    stop there or later, at N at the latest). ``seconds_per_step``: measured after the first execution (its tracing
    and compilation would inflate the first ETA several times where an epoch is a few steps); None while no step
    has run since, and the line then says when the ETA comes."""
    line = f"epoch {epoch}/{epochs}"
    if "epoch_loss" in logs:
        line += f"  loss {logs['epoch_loss']:.4f}"
    last = epochs
    if early is not None and f"epoch_{early.monitor}" in logs:
        line += f"  {early.monitor} {logs[f'epoch_{early.monitor}']:.4f}"
    if early is not None and np.isfinite(early.best):
        line += f"  best {early.best:.4f} at epoch {early.best_epoch + 1}"
        last = min(epochs, epoch + max(early.patience - early.wait, 0))
    elif early is not None and f"epoch_{early.monitor}" in logs:  # in the warmup, before the first watched epoch
        line += "  (warming up)"
        last = min(epochs, early.start_from_epoch + 1 + early.patience)
    bound = f"; stops by epoch {last} unless it improves" if last < epochs else ""
    if seconds_per_step is None:
        return f"{line}  ETA after the next epoch (the first steps compile){bound}"
    remaining = max(last - epoch, 0) * steps_per_epoch * seconds_per_step
    return f"{line}  ETA {_duration(remaining)}{bound}"


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{seconds:02d}s"


class CatchUpRows(tf.keras.callbacks.Callback):
    """At each epoch's end (and training's), before any later callback reads the weights (validation, early
    stopping, checkpoints), pays the rows of the tables a ``CatchUpAdam`` updates lazily what dense Adam would have
    moved them by meanwhile (``retrieval.optimizers.CatchUpAdam.catch_up``); other optimizers have nothing owed."""

    def _catch_up(self) -> None:
        catch_up = getattr(self.model.optimizer, "catch_up", None)
        if catch_up is not None:
            catch_up()

    def on_epoch_end(self, epoch, logs=None):
        self._catch_up()

    def on_train_end(self, logs=None):
        self._catch_up()


class StopAtStep(_StepCallback):
    """Stops at exactly ``total_steps`` optimizer steps (a resumed run's last Keras epoch would otherwise overrun;
    ``fit`` runs one step per execution in such a run, so that the stop falls on the step)."""

    def __init__(self, total_steps: int):
        super().__init__()
        self.total_steps = total_steps

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if self.step >= self.total_steps:
            self.model.stop_training = True


class EvaluateCallback(tf.keras.callbacks.Callback):
    """Calls ``evaluate_fn()`` every ``every_epochs`` epochs and adds the value to the epoch logs as ``name`` (so
    EarlyStopping, TensorBoard and the history see it); ``seconds``: the last evaluation's wall time."""

    def __init__(self, evaluate_fn: Callable[[], float], name: str, every_epochs: int = 1):
        super().__init__()
        self.evaluate_fn, self.name, self.every_epochs = evaluate_fn, name, max(int(every_epochs), 1)
        self.seconds = 0.0

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs == 0 and logs is not None:
            start = time.perf_counter()
            logs[self.name] = float(self.evaluate_fn())  # logged on the epoch's progress line
            self.seconds = time.perf_counter() - start


@dataclasses.dataclass(frozen=True)
class StopBelow:
    """A probe of a training's promise: stop once epoch ``epoch`` (from 1) was evaluated below ``floor``."""

    epoch: int
    floor: float


class StopBelowCallback(tf.keras.callbacks.Callback):
    """Stops training at the end of the first epoch at or after ``rule.epoch`` when the validation metric ``name`` of
    epoch ``rule.epoch`` was below ``rule.floor``. The score comes from ``early``'s scores when it keeps them across a
    resume (``ResumableEarlyStopping``), so a run resumed after that epoch stops at its next epoch's end on the same
    score. Must run after the validation (``EvaluateCallback``) and after ``early``."""

    def __init__(self, rule: StopBelow, name: str, early: Optional[tf.keras.callbacks.EarlyStopping]):
        super().__init__()
        self.rule, self.name, self.early = rule, name, early
        self.seen: dict[int, float] = {}

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self.name in logs:
            self.seen[epoch + 1] = float(logs[self.name])
        scores = dict(getattr(self.early, "scores", ())) | self.seen
        score = scores.get(self.rule.epoch)
        if epoch + 1 >= self.rule.epoch and score is not None and score < self.rule.floor:
            self.model.stop_training = True


@dataclasses.dataclass(frozen=True)
class EpochTime:
    """A measured epoch's wall time (``seconds``, its validation included) and its validation's alone; ``done``: the
    epochs done when it ended; ``compile_seconds``: how much longer the first epoch's first execution took than its
    others (tracing and XLA compilation, paid once per model: again by a refit, never by a further epoch)."""

    seconds: float
    validation_seconds: float = 0.0
    compile_seconds: float = 0.0
    done: int = 1

    @property
    def training_seconds(self) -> float:
        """The epoch's training steps (the first epoch's with its compilation)."""
        return max(self.seconds - self.validation_seconds, 0.0)

    @property
    def steady_seconds(self) -> float:
        """What each further epoch takes (its validation included): the first without its compilation."""
        return max(self.seconds - (self.compile_seconds if self.done == 1 else 0.0), 0.0)

    @property
    def steady_training_seconds(self) -> float:
        return max(self.steady_seconds - self.validation_seconds, 0.0)

    @classmethod
    def planned(cls, checkpoint_dir: Path) -> Optional["EpochTime"]:
        """The last epoch a phase's plan measured (``PlanEpochs``' :data:`PLAN_RECORD` in ``checkpoint_dir``;
        None without one)."""
        path = Path(checkpoint_dir) / PLAN_RECORD
        if not path.exists():
            return None
        record = artifacts.read_json(path)
        return cls(record["epoch_seconds"], record["validation_seconds"], record["compile_seconds"],
                   done=record["measured_epoch"])


class PlanEpochs(tf.keras.callbacks.Callback):
    """Sets the run's length from its measured epochs: ``plan(EpochTime)`` gives the epoch count (clamped to
    [epochs done, ``cap``]) after the first epoch, and again after the second, whose time has none of the first's
    one-time costs (the first execution's compilation, which the first plan leaves out, and the first validation's
    set-up, which it cannot tell apart); the cosine's length (``decay_steps``, a variable the schedule reads every
    step), the stop and the progress lines follow it, and ``record`` keeps the decision so that a resumed run trains
    to the same length (``fit``). Must run after the validation (``EvaluateCallback``) and before the progress line
    of the epoch."""

    PLANS = 2  # after the first epoch and after the second

    def __init__(self, plan: Callable[[EpochTime], int], cap: int, steps_per_epoch: int, warmup_steps: int,
                 decay_steps: tf.Variable, record: Optional[Path], dependents: list,
                 evaluation: Optional[EvaluateCallback] = None):
        super().__init__()
        self.plan, self.cap, self.steps_per_epoch, self.warmup_steps = plan, cap, steps_per_epoch, warmup_steps
        self.decay_steps, self.record, self.dependents, self.evaluation = decay_steps, record, dependents, evaluation
        self.epochs: Optional[int] = None
        self.plans, self._compile = 0, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        if self.plans < self.PLANS:
            self._start, self._first_step, self._steps = time.perf_counter(), None, 0

    def on_train_batch_end(self, batch, logs=None):
        if self.plans < self.PLANS:
            self._steps += 1
            if self._first_step is None:
                self._first_step = time.perf_counter() - self._start

    def on_epoch_end(self, epoch, logs=None):
        if self.plans >= self.PLANS:
            return
        seconds = time.perf_counter() - self._start
        validation = self.evaluation.seconds if self.evaluation is not None else 0.0
        if self.plans == 0:
            self._compile = self._compile_seconds(seconds - validation)
        self.plans += 1
        measured = EpochTime(seconds, validation, self._compile, done=epoch + 1)
        self.epochs = min(max(int(self.plan(measured)), epoch + 1), self.cap)
        total_steps = self.epochs * self.steps_per_epoch
        self.decay_steps.assign(float(cosine_steps(total_steps, self.warmup_steps)))
        for callback in self.dependents:  # StopAtStep, ProgressLogger
            callback.total_steps = total_steps
            if hasattr(callback, "epochs"):
                callback.epochs = self.epochs
        if self.epochs == epoch + 1:  # this epoch was the last (StopAtStep only looks at the end of a batch)
            self.model.stop_training = True
            self.plans = self.PLANS
        if self.record is not None:
            artifacts.write_json(self.record, {"epochs": self.epochs, "measured_epoch": epoch + 1,
                                               "epoch_seconds": measured.seconds,
                                               "validation_seconds": measured.validation_seconds,
                                               "compile_seconds": measured.compile_seconds})

    def _compile_seconds(self, training_seconds: float) -> float:
        """The first execution's time beyond the mean of the epoch's others (0 with a single one)."""
        if self._first_step is None or self._steps < 2:
            return 0.0
        others = (training_seconds - self._first_step) / (self._steps - 1)
        return max(self._first_step - others, 0.0)


class CheckpointEvery(_StepCallback):
    """Saves through ``manager`` every ``every_steps`` optimizer steps and at the end of training (always: early
    stopping may have restored other weights since the last periodic save)."""

    def __init__(self, manager: tf.train.CheckpointManager, every_steps: int):
        super().__init__()
        self.manager, self.every_steps = manager, max(int(every_steps), 1)

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if self.crossed(self.every_steps):
            self.manager.save(checkpoint_number=self.step)

    def on_train_end(self, logs=None):
        self.manager.save(checkpoint_number=self.step)


def learning_rate(config: ml_collections.ConfigDict, total_steps: int, decay_steps: Optional[tf.Variable] = None):
    """The learning rate or schedule: linear warmup to ``learning_rate``, then constant or cosine decay
    (Loshchilov & Hutter 2017, SGDR eq. 5 without restarts). ``decay_steps``: a variable holding the cosine's length
    (``total_steps`` minus the warmup), for a run whose length is set once training has started (``PlanEpochs``)."""
    warmup = max(int(config.warmup_steps), 0)
    if config.schedule == "constant" and warmup == 0:
        return float(config.learning_rate)
    alpha = 1.0 if config.schedule == "constant" else float(config.min_learning_rate_ratio)
    return tf.keras.optimizers.schedules.CosineDecay(
        0.0 if warmup else float(config.learning_rate),
        decay_steps=cosine_steps(total_steps, warmup) if decay_steps is None else decay_steps, alpha=alpha,
        warmup_target=float(config.learning_rate) if warmup else None, warmup_steps=warmup)


def cosine_steps(total_steps: int, warmup_steps: int) -> int:
    """The cosine's length in a run of ``total_steps``: the steps after the warmup (at least 1)."""
    return max(int(total_steps) - int(warmup_steps), 1)


def learning_rate_at(config: ml_collections.ConfigDict, total_steps: int, step: int) -> float:
    """The learning rate ``learning_rate(config, total_steps)`` gives at optimizer step ``step``."""
    schedule = learning_rate(config, total_steps)
    return float(schedule(step)) if callable(schedule) else schedule


def make_optimizer(config: ml_collections.ConfigDict, total_steps: int, sparse: bool = False,
                   decay_steps: Optional[tf.Variable] = None) -> tf.keras.optimizers.Optimizer:
    """Adam, Adagrad or row-wise Adagrad with the schedule (``learning_rate``) and the decoupled weight decay of
    ``config``; with ``sparse``, their lazy versions (``retrieval.optimizers``: embedding tables update only the
    looked-up rows; ``use_sparse_updates``)."""
    kinds = {"adam": (tf.keras.optimizers.Adam, CatchUpAdam), "adagrad": (tf.keras.optimizers.Adagrad, LazyAdagrad),
             "rowwise_adagrad": (RowwiseAdagrad, LazyRowwiseAdagrad)}
    optimizer = kinds[config.optimizer][int(sparse)](learning_rate(config, total_steps, decay_steps),
                                                     weight_decay=config.weight_decay or None)
    if config.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=["bias"])
    return optimizer


def largest_table_rows(model: tf.keras.Model) -> int:
    """Rows of the model's largest embedding table (0 without one)."""
    return max((layer.input_dim for layer in model.submodules if isinstance(layer, tf.keras.layers.Embedding)),
               default=0)


def use_sparse_updates(config: ml_collections.ConfigDict, model: tf.keras.Model) -> bool:
    """Resolves ``config.sparse_updates`` for ``model``: "auto" is on from ``SPARSE_UPDATES_MIN_ROWS`` rows in the
    largest embedding table (below, dense Adam's step is cheap and the measured quality is the reference)."""
    choice = config.sparse_updates
    if choice != "auto":
        return choice == "on"
    return largest_table_rows(model) >= SPARSE_UPDATES_MIN_ROWS


def use_jit_compile(config: ml_collections.ConfigDict, model: TwoTowerModel) -> bool:
    """Resolves ``config.jit_compile`` for ``model`` (see ``default_train_config``). TensorFlow's candidate samplers
    have no XLA kernel, and cross-replica gathers are left to the distribution strategy, so "auto" is off there;
    "on" with a sampling objective fails at the first step with XLA's error. Parameter-server steps are never
    compiled (remote variables)."""
    strategy = model.distribute_strategy
    if parameter_server.uses_coordinator(strategy):
        if config.jit_compile == "on":
            raise InputError("jit_compile 'on' is not supported by strategy 'parameter_server'",
                             field="train.jit_compile")
        return False
    if config.jit_compile != "auto":
        return config.jit_compile == "on"
    return model.xla_compatible and strategy.num_replicas_in_sync == 1


def steps_per_execution(config: ml_collections.ConfigDict, strategy: tf.distribute.Strategy, step: int,
                        steps_per_epoch: int) -> int:
    """The training steps Keras runs per call into TensorFlow: ``config.steps_per_execution``, reduced to a divisor
    of ``checkpoint_every_steps`` and ``log_every_steps`` (so that within an epoch those fall on an execution's
    end); 1 under parameter-server training (one scheduled step per call) and in a run resumed mid-epoch (whose
    last Keras epoch stops mid-way, at a step an execution of several would overrun)."""
    if parameter_server.uses_coordinator(strategy) or step % steps_per_epoch:
        return 1
    return math.gcd(int(config.steps_per_execution), int(config.checkpoint_every_steps),
                    int(config.log_every_steps))


Examples = examples_lib.ExampleSource | Mapping[str, np.ndarray]
"""An ``examples.ExampleSource`` (next-item or set examples, in memory or streamed from shards), or next-item arrays
in memory (``examples.next_item_examples``)."""


def build_variables(model: TwoTowerModel, examples: Examples) -> None:
    """Creates every variable of the model (and the optimizer slots once compiled), in the model's strategy scope,
    so that a checkpoint restores at once (not deferred) and weights can be copied in (warm start)."""
    sample = {key: tf.constant(value) for key, value in examples_lib.head(examples_lib.as_source(examples), 2).items()}
    with model.distribute_strategy.scope():
        model(sample)
        model.item_vectors(tf.cast(sample["label"], tf.int32))
        if model.optimizer is not None:
            model.optimizer.build(model.trainable_variables)


def fit(model: TwoTowerModel, examples: Examples, config: ml_collections.ConfigDict, *,
        checkpoint_dir: Optional[PathLike] = None, tensorboard_dir: Optional[PathLike] = None,
        evaluate_fn: Optional[Callable[[], float]] = None,
        validation_examples: Optional[Mapping[str, np.ndarray]] = None,
        plan_epochs: Optional[Callable[[EpochTime], int]] = None, phase: str = "",
        stop_below: Optional[StopBelow] = None) -> FitResult:
    """Trains ``model`` on next-item ``examples`` (``retrieval.data.examples.next_item_examples``), set examples
    (``retrieval.data.set_examples.SetExamples``) or streamed example shards (``retrieval.data.shards``), resuming
    from the latest checkpoint in ``checkpoint_dir`` if there is one.

    Args:
      model: built by ``build_model`` (inside ``strategy.scope()`` when distributed); compiled here.
      examples: equal-length arrays ``user``, ``history``, ``history_length``, ``label``, optional ``example_age``;
        or ``SetExamples``, whose histories are redrawn every epoch, or ``ExampleShards`` read from TFRecord files.
      config: the ``train`` section (``default_train_config``).
      checkpoint_dir: where checkpoints go (every ``checkpoint_every_steps`` and at the end); None: no checkpoints.
      tensorboard_dir: TensorBoard log directory; None: none.
      evaluate_fn: ``() -> float``, a validation metric (higher is better, e.g. full-corpus recall@k of the
        current weights), logged as ``config.eval_metric_name`` and used for early stopping.
      validation_examples: optional held-out examples whose loss is logged as ``val_loss`` each epoch.
      plan_epochs: ``EpochTime -> int``: the epoch count, set from the first two epochs' measured times (a time budget,
        ``retrieval.jobs.budget``), at most ``config.epochs``; the cosine spans it (``PlanEpochs``). The decision is
        kept in ``checkpoint_dir`` (:data:`PLAN_RECORD`), and a resumed run trains to it.
      phase: a name the epoch lines start with (e.g. ``tuning``, ``refit``), so each ETA says what it is the ETA of.
      stop_below: stop after its epoch when the validation metric is below its floor (``StopBelowCallback``; needs
        ``evaluate_fn``): a probe that gives up a training that will not reach a known score.

    Returns:
      A ``FitResult``; the model holds the final (or, after early stopping, the best) weights.
    """
    TRAIN.check(config)  # the pipelines validated it already; a direct call gets the same rules
    examples = examples_lib.as_source(examples)
    num_examples = len(examples)
    if num_examples == 0:
        raise InputError("no training examples", field="train")
    strategy = model.distribute_strategy
    if validation_examples is not None and parameter_server.uses_coordinator(strategy):
        raise InputError("validation_examples (val_loss) are not supported by strategy 'parameter_server'; "
                         "use evaluate_fn", field="train")
    steps_per_epoch = math.ceil(num_examples / config.batch_size)
    epochs, decay_steps = config.epochs, None
    record = Path(checkpoint_dir) / PLAN_RECORD if checkpoint_dir is not None else None
    if plan_epochs is not None and record is not None and record.exists():  # decided by an earlier attempt
        epochs, plan_epochs = int(artifacts.read_json(record)["epochs"]), None
    total_steps = epochs * steps_per_epoch
    if plan_epochs is not None:
        if parameter_server.uses_coordinator(strategy):
            raise InputError("a time budget is not supported by strategy 'parameter_server'", field="train.strategy")
        decay_steps = tf.Variable(float(max(total_steps - max(int(config.warmup_steps), 0), 1)), trainable=False)
    jit_compile = use_jit_compile(config, model)
    logging.info("training step %s", "XLA-compiled" if jit_compile else "not XLA-compiled")
    with strategy.scope():
        model.compile(optimizer=make_optimizer(config, total_steps, use_sparse_updates(config, model), decay_steps),
                      jit_compile=jit_compile)
    build_variables(model, examples)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager, private_dir = None, None
    if checkpoint_dir is not None:
        directory = distributed.worker_path(Path(checkpoint_dir), strategy)
        private_dir = None if directory == Path(checkpoint_dir) else directory
        manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=config.keep_checkpoints)
        restored = checkpoints.restore_newest_intact(checkpoint, manager)
        if restored:
            logging.info("resumed from %s at step %d", restored, int(model.optimizer.iterations.numpy()))
    step = int(model.optimizer.iterations.numpy())
    try:
        if step >= total_steps:
            logging.info("training already complete (step %d of %d)", step, total_steps)
            return FitResult(history={}, step=step)

        def stream() -> tf.data.Dataset:  # under parameter_server, built by every worker
            return examples.to_dataset(config.batch_size, shuffle=True, seed=config.seed, repeat=True).skip(step)

        log_dir = tensorboard_dir if tensorboard_dir is not None and distributed.is_chief(strategy) else None
        stop = StopAtStep(total_steps)
        callbacks = [stop, CatchUpRows()]
        if parameter_server.uses_coordinator(strategy):
            dataset = parameter_server.per_worker_dataset(stream, strategy)
            timeout_s = config.ps_timeout_s
            callbacks.insert(0, parameter_server.Synchronize(strategy, timeout_s))
        else:
            dataset = stream()
        early, evaluation = None, None
        if evaluate_fn is not None:
            evaluation = EvaluateCallback(evaluate_fn, config.eval_metric_name, config.eval_every_epochs)
            callbacks.append(evaluation)
        planner = None
        if plan_epochs is not None:
            planner = PlanEpochs(plan_epochs, config.epochs, steps_per_epoch, max(int(config.warmup_steps), 0),
                                 decay_steps, record, [stop], evaluation)
            callbacks.append(planner)
        if evaluate_fn is not None:
            # The epochs that end inside the learning-rate warmup are not watched: on a small log an epoch is a few
            # steps, and a model still warming up would spend the patience (the self-attentive variant's 100-step
            # warmup is 8 epochs of the bundled data's 3,000 users at batch 256).
            warmup_epochs = max(int(config.warmup_steps), 0) // steps_per_epoch
            if config.early_stopping_patience > 0 and manager is not None:  # its state resumes with the run
                early = ResumableEarlyStopping(config.eval_metric_name, config.early_stopping_patience,
                                               Path(manager.directory), manager, step // steps_per_epoch,
                                               start_from_epoch=warmup_epochs)
                callbacks.append(early)
            elif config.early_stopping_patience > 0:
                early = tf.keras.callbacks.EarlyStopping(config.eval_metric_name, mode="max",
                                                         patience=config.early_stopping_patience,
                                                         restore_best_weights=True, start_from_epoch=warmup_epochs)
                callbacks.append(early)
        if stop_below is not None and evaluate_fn is not None:
            callbacks.append(StopBelowCallback(stop_below, config.eval_metric_name, early))
        progress = ProgressLogger(config.log_every_steps, config.batch_size, total_steps, log_dir, steps_per_epoch,
                                  early, phase)
        callbacks.append(progress)
        if planner is not None:
            planner.dependents.append(progress)
        if manager is not None:
            callbacks.append(CheckpointEvery(manager, config.checkpoint_every_steps))  # last: saves restored weights
        validation, validation_steps = None, None
        if validation_examples is not None:  # (steps_per_execution > 1 needs the validation steps stated)
            validation_source = examples_lib.as_source(validation_examples)
            validation = validation_source.to_dataset(config.batch_size, shuffle=False)
            validation_steps = math.ceil(len(validation_source) / config.batch_size)
        with strategy.scope():  # the same optimizer (restored), now with the steps per call the resumed step allows
            model.compile(optimizer=model.optimizer, jit_compile=jit_compile,
                          steps_per_execution=steps_per_execution(config, strategy, step, steps_per_epoch))
        try:
            history = model.fit(dataset, epochs=config.epochs, steps_per_epoch=steps_per_epoch,
                                initial_epoch=step // steps_per_epoch, callbacks=callbacks,
                                validation_data=validation, validation_steps=validation_steps, verbose=0)
        finally:
            progress.stop()
        if planner is not None and planner.epochs is not None:
            total_steps = planner.epochs * steps_per_epoch
        best = None if early is None or not np.isfinite(early.best) else float(early.best)
        scores = history.history.get(config.eval_metric_name)
        best_epoch = None
        if scores:  # without early stopping the weights kept are the last epoch's: its score and epoch are "best"
            kept = int(np.argmax(scores)) if early is not None else len(scores) - 1
            best_epoch = step // steps_per_epoch + config.eval_every_epochs * (kept + 1)
            if early is None:
                best = float(scores[-1])
        if isinstance(early, ResumableEarlyStopping) and early.scores:  # the whole run's, before a resume too
            history.history[config.eval_metric_name] = [score for _, score in early.scores]
            best_epoch = early.best_epoch_number()
        return FitResult(history=history.history, step=int(model.optimizer.iterations.numpy()), best_metric=best,
                         stopped_early=bool(early is not None and early.stopped_epoch > 0), best_epoch=best_epoch,
                         best_learning_rate=(None if best_epoch is None else
                                             learning_rate_at(config, total_steps, best_epoch * steps_per_epoch)))
    finally:
        if private_dir is not None:
            shutil.rmtree(private_dir, ignore_errors=True)
