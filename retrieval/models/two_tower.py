"""``TwoTowerModel``: the user and item towers trained with the objective named in the config.

Training step (``train_step``): user vectors ``u = user_tower(batch)``, per-example losses from the objective, reduced
by the *global* batch size (``distributed.average_loss``) so that summing the replicas' gradients gives the gradient
of the global batch. The logged ``loss`` is the exact mean per-example loss over all replicas (a ``Mean`` metric).

Retrieval scores are ``score(u, i) = user_vectors(u) . item_vectors(i)``; for the classic YoutubeDNN output table the
bias is folded in: ``[u / T, 1] . [w_i, b_i] = (u . w_i) / T + b_i``, the training logit without the correction.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval import distributed
from retrieval.data.vocab import NUM_RESERVED
from retrieval.models.layers import MASK_BELOW, interleaved_parts, masked_mean
from retrieval.models.layout import ScoreLayout
from retrieval.models.objectives import OutputTable
from retrieval.models.sequence_encoder import LENGTH_BUCKETS, every_position_targets, length_buckets
from retrieval.models.towers import ItemTower, UserTower


class TwoTowerModel(tfrs.Model):
    """A two-tower retrieval model (Yi et al. 2019; Covington et al. 2016).

    Args:
      user_tower: maps a batch dict (``user``, ``history``, optional ``example_age``) to ``[B, d]``.
      objective: a layer ``(user_vectors, labels, training) -> [B]`` per-example losses (``models.objectives``).
      layout: the exported vectors' layout (``layout.ScoreLayout``: the item tower's blocks and content coordinates,
        or the output table's bias), which the metric and the items' similarity follow.
      item_tower: maps item indices to ``[..., d]``; or, exclusively,
      output_table: the YoutubeDNN output softmax table (item vectors are its rows, with the bias folded in).
      temperature: ``T`` of the objective (used to fold the output-table bias into the exported user vectors).
      max_history: the history length the model was trained with; the exported encoder pads/truncates to it.
      inference_part_size: 0, or the size of the parts a longer history is dealt into at inference (set data): the
        user vector is then the mean of the parts' vectors (re-normalised when the tower L2-normalises), so the
        tower pools histories as long as the random subsets it was trained on (see ``user_vectors``).
      every_position: train on every history position at once (a sequence encoder's user tower): the user vector
        after each history item is scored against the item that followed it (``sequence_encoder.
        every_position_targets``), and the loss is the mean over those positions (``compute_loss``).
    """

    def __init__(self, user_tower: UserTower, objective: tf.keras.layers.Layer, layout: ScoreLayout, *,
                 item_tower: Optional[ItemTower] = None, output_table: Optional[OutputTable] = None,
                 temperature: float = 1.0, max_history: int = 50, inference_part_size: int = 0,
                 every_position: bool = False):
        super().__init__()
        if (item_tower is None) == (output_table is None):
            raise ValueError("a TwoTowerModel has either an item tower or an output table")
        self.user_tower = user_tower
        self.item_tower = item_tower
        self.objective = objective
        self.layout = layout
        self.output_table = output_table
        self.temperature = float(temperature)
        self.max_history = int(max_history)
        self.inference_part_size = int(inference_part_size)
        self.every_position = bool(every_position)
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")

    @property
    def metric(self) -> str:
        """Similarity of the exported vectors, the layout's (``ScoreLayout.metric``): "cosine" or "ip"."""
        return self.layout.metric

    @property
    def item_similarity(self) -> str:
        """How items compare with each other (``/v1/similar``): "vectors" (the inner product or cosine of their
        exported vectors), or "score_correlation" with the cold head, whose warm and cold items sit in separate
        blocks (every warm-cold inner product 0): the correlation of their scores over users
        (``retrieval.index.similar``)."""
        return "score_correlation" if self.layout.heads > 1 else "vectors"

    @property
    def xla_compatible(self) -> bool:
        """Whether the training step can be XLA-compiled (the objective samples no negatives, and the targets are not
        the every-position ones, whose number varies from batch to batch)."""
        return bool(getattr(self.objective, "xla_compatible", False)) and not self.every_position

    @property
    def item_vocab_size(self) -> int:
        return (self.item_tower or self.output_table).vocab_size

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """User vectors ``[B, d]`` of a batch (the query side of the objective)."""
        return self.user_tower(inputs, training=training)

    def compute_loss(self, inputs: Mapping[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        """Sum of the per-example losses divided by the global batch size; updates the ``loss`` metric. Traced in an
        XLA-compiled step (``jit_compile``), the user tower pools in chunks (``UserTower.chunked_pooling``).

        With ``every_position`` the examples are the batch's valid history positions (each scored against the item
        that followed it; the objective's negatives are shared by all of them), so the loss is the mean over the
        global batch's positions: SASRec's per-position average (Kang and McAuley 2018, eq. 5, with a softmax). A
        batch's ``weight`` (set examples with weighted teacher pairs) multiplies each example's loss."""
        labels = tf.cast(inputs["label"], tf.int32)
        if self.every_position:
            queries, labels = self._every_position_queries(inputs, labels, training)
        else:
            self.user_tower.chunked_pooling = bool(self.jit_compile)
            try:
                queries = self(inputs, training=training)
            finally:
                self.user_tower.chunked_pooling = False
        per_example = self.objective(queries, labels, training=training)
        if "weight" in inputs and not self.every_position:  # weighted teacher pairs (retrieval.data.set_examples)
            per_example = per_example * tf.cast(inputs["weight"], per_example.dtype)
        self.loss_tracker.update_state(per_example)
        return distributed.average_loss(per_example)

    def _every_position_queries(self, inputs: Mapping[str, tf.Tensor], labels: tf.Tensor,
                                training: bool) -> tuple[tf.Tensor, tf.Tensor]:
        """The user vector after every valid history position of the batch and the item that followed it, ``([N, d],
        [N])``. The rows are encoded in ``LENGTH_BUCKETS`` parts of similar history length (``sequence_encoder.
        length_buckets``), each at its own width; the objective then sees all positions together (one batch of
        negatives)."""
        history = tf.cast(inputs["history"], tf.int32)
        queries, targets = [], []
        for rows in length_buckets(history >= MASK_BELOW, LENGTH_BUCKETS):
            part = {key: tf.gather(value, rows) for key, value in inputs.items()}
            states = self.user_tower(part, training=training, every_position=True)
            target, where = every_position_targets(part["history"][:, :tf.shape(states)[1]], tf.gather(labels, rows))
            queries.append(tf.boolean_mask(states, where))
            targets.append(tf.boolean_mask(target, where))
        return tf.concat(queries, axis=0), tf.concat(targets, axis=0)

    def train_step(self, inputs: Mapping[str, tf.Tensor]) -> dict:
        with tf.GradientTape() as tape:
            loss = self.compute_loss(inputs, training=True)
        gradients = tape.gradient(loss, self.trainable_variables)
        if self.jit_compile and not getattr(self.optimizer, "sparse_updates", False):
            # (A lazy optimizer, retrieval.optimizers, keeps the slices: it updates only their rows, in XLA too.)
            # Embedding gradients arrive as row slices. XLA sums them into a dense gradient in one fused loop (~10x
            # faster than TensorFlow's CPU segment sum, which Keras would run to de-duplicate the rows, with a
            # tf.unique that XLA cannot compile). With Adam the update touches every row anyway (dense decay of
            # the moments), so a dense gradient costs no extra pass over the table.
            gradients = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients]
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, inputs: Mapping[str, tf.Tensor]) -> dict:
        self.compute_loss(inputs, training=False)
        return {m.name: m.result() for m in self.metrics}

    def user_vectors(self, user: tf.Tensor, history: tf.Tensor) -> tf.Tensor:
        """Exported user vectors for user indices [B] and history indices [B, H] (example age 0, as at serving).

        With ``inference_part_size`` p, a history of n > p items is dealt round-robin into ceil(n / p) parts
        (``layers.interleaved_parts``) and the query is the mean of the tower's outputs on the parts. With L2-
        normalised outputs, the cosine of that mean with an item vector ranks items as the mean of the parts'
        cosines would, so one exported vector serves the average of the parts' scores (a test-time average over
        training-sized histories, which a set model trained on random subsets of at most ``max_history`` items
        ranks better with than with one pool of all items: a hand-written step, none of the dependencies has it).
        """
        if self.inference_part_size:
            parts, used = interleaved_parts(history, self.inference_part_size)
            per_part = self.user_tower({"user": tf.repeat(user, tf.shape(parts)[1]),
                                        "history": tf.reshape(parts, [-1, self.inference_part_size])})
            query = masked_mean(tf.reshape(per_part, [tf.shape(parts)[0], tf.shape(parts)[1], -1]), used)
            query = self.user_tower.normalize(query)
        else:
            query = self.user_tower({"user": user, "history": history})
        if self.output_table is None:
            return query
        return tf.concat([query / self.temperature, tf.ones_like(query[:, :1])], axis=1)

    def item_vectors(self, indices: tf.Tensor) -> tf.Tensor:
        """Exported item vectors for item indices [N]: the item tower, or ``[w_i, b_i]`` of the output table."""
        if self.output_table is None:
            return self.item_tower(indices)
        weights, bias = self.output_table(indices)
        return tf.concat([weights, bias[:, tf.newaxis]], axis=1)

    def catalogue_vectors(self, batch_size: int = 8192, placed_by_features: bool = False) -> np.ndarray:
        """Item vectors of every known item, indices ``2 .. V-1`` in order, computed in blocks: ``[V - 2, d]``;
        with ``placed_by_features``, the vectors their features alone give them (``ItemTower.placed_by_features``)."""
        embed = self.item_tower.placed_by_features if placed_by_features else self.item_vectors
        blocks = [embed(tf.range(start, min(start + batch_size, self.item_vocab_size))).numpy()
                  for start in range(NUM_RESERVED, self.item_vocab_size, batch_size)]
        return np.concatenate(blocks, axis=0)
