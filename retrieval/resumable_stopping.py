"""Early stopping whose state survives a crash: a resumed run stops, and keeps, what the uninterrupted run would.

Keras's ``EarlyStopping`` keeps its state (the scores so far, the best one, the epochs since, the best weights) in
memory, so a run killed during training and resumed from its checkpoint starts that count again: it stops at other
epochs, restores other weights and reports another best epoch. :class:`ResumableEarlyStopping` writes the state next
to the checkpoints at every evaluated epoch and reads it back when training resumes:

* ``early_stopping.json``: the (epoch, score) of every evaluated epoch;
* ``early_stopping_best-<epoch>.npz``: the best epoch's weights (``model.get_weights()`` order).

Order of the writes at an epoch's end: the best weights (when improved), the scores, then a checkpoint of the
training state, then the older best weights are removed. A resume from a checkpoint keeps only the scores of the
epochs that checkpoint completed, so whatever moment the process died, the scores, the best weights and the
checkpoint agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from retrieval import artifacts

STATE = "early_stopping.json"
BEST = "early_stopping_best-{epoch}.npz"


class ResumableEarlyStopping(tf.keras.callbacks.EarlyStopping):
    """``EarlyStopping(monitor, mode="max", patience, restore_best_weights=True)`` whose state lives in ``directory``
    (see the module docstring); ``manager`` saves the training state at each evaluated epoch's end, and
    ``completed_epochs`` is the number of epochs the restored checkpoint had finished."""

    def __init__(self, monitor: str, patience: int, directory: Path, manager: tf.train.CheckpointManager,
                 completed_epochs: int, start_from_epoch: int = 0):
        super().__init__(monitor, mode="max", patience=patience, restore_best_weights=True,
                         start_from_epoch=start_from_epoch)
        self.directory, self.manager, self.completed_epochs = Path(directory), manager, completed_epochs
        self.scores: list[tuple[int, float]] = []  # (epoch number from 1, score) of every evaluated epoch

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        state = self.directory / STATE
        saved = json.loads(state.read_text())["scores"] if state.exists() else []
        for number, score in ([int(e), float(s)] for e, s in saved if int(e) <= self.completed_epochs):
            self.scores.append((number, score))
            if number <= self.start_from_epoch:
                continue
            self.wait += 1  # what EarlyStopping.on_epoch_end did with these scores
            if self._is_improvement(score, self.best):
                self.best, self.best_epoch, self.wait = score, number - 1, 0
        best = self._best_file()
        if best is not None and best.exists():
            with np.load(best) as weights:
                self.best_weights = [weights[f"arr_{i}"] for i in range(len(weights.files))]

    def on_epoch_end(self, epoch, logs=None):
        current = self.get_monitor_value(logs)
        before = self.best
        super().on_epoch_end(epoch, logs)
        if current is None:
            return
        if self.best != before:
            with artifacts.atomic_path(self.directory / BEST.format(epoch=epoch + 1)) as tmp, open(tmp, "wb") as f:
                np.savez(f, *self.best_weights)
        self.scores.append((epoch + 1, float(current)))
        artifacts.write_json(self.directory / STATE, {"scores": self.scores})
        if not self.model.stop_training:  # stopping: the final checkpoint holds the restored best weights instead
            self.manager.save(checkpoint_number=int(self.model.optimizer.iterations.numpy()))
        keep = self._best_file()
        for stale in self.directory.glob(BEST.format(epoch="*")):
            if stale != keep:
                stale.unlink(missing_ok=True)

    def _best_file(self) -> Optional[Path]:
        number = self.best_epoch_number()
        return None if number is None else self.directory / BEST.format(epoch=number)

    def best_epoch_number(self) -> Optional[int]:
        """The evaluated epoch (from 1) with the best score, the first one reaching it, over the whole run, resumes
        included; the epochs before ``start_from_epoch`` are not candidates (the last one is, when no other is: the
        weights are then the last epoch's)."""
        watched = [entry for entry in self.scores if entry[0] > self.start_from_epoch] or self.scores[-1:]
        return max(watched, key=lambda entry: (entry[1], -entry[0]))[0] if watched else None
