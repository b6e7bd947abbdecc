"""Lazy (row-wise sparse) Adam and Adagrad: a step costs O(rows looked up * d), not O(table rows * d).

tf-keras ``Adam`` given an embedding gradient (``tf.IndexedSlices``) still decays both moments of *every* row and
moves every row (``m <- b1 m`` and ``w <- w - alpha m / (sqrt(v) + eps)`` over the whole table), and decoupled
weight decay shrinks the whole table: a step over a 1M-row table costs ~100x one over 4k rows. The optimizers here
update only the rows a batch touches, as TensorFlow Addons' ``LazyAdam`` does. For a variable whose gradient is
``IndexedSlices`` with the summed row gradients ``g_r`` of the touched rows ``r`` (duplicate indices summed):

    t = optimizer.iterations + 1                        (the global step: bias correction as in Adam)
    alpha = lr_t * sqrt(1 - b2^t) / (1 - b1^t)
    w_r <- w_r - lr_t * wd * w_r                        (decoupled weight decay, touched rows only)
    m_r <- b1 m_r + (1 - b1) g_r
    v_r <- b2 v_r + (1 - b2) g_r^2
    w_r <- w_r - alpha m_r / (sqrt(v_r) + eps)

and every untouched row keeps its value *and its moments*: where dense Adam would decay ``m`` and ``v`` of a row
absent from the batch (and still move it by the decayed momentum), lazy Adam leaves them as they were until the
row is next looked up. A row touched at every step gets exactly Adam's update. ``CatchUpAdam`` (what
``train.sparse_updates`` builds for Adam) pays each row those missed moves in closed form when it is next looked up
and at every epoch's end: dense Adam's step at the lazy step's cost. A table that a batch looks up by at least
``DENSE_FROM_SHARE`` x its rows in slots (a history table) takes the dense step instead: there it is the cheaper.
Lazy Adagrad is Adagrad on the touched rows (``acc_r <- acc_r + g_r^2``,
``w_r <- w_r - lr_t g_r / sqrt(acc_r + eps)``, which tf-keras already does), with the weight decay also restricted
to the touched rows. Variables with dense gradients (dense layers, biases) get the parent class's update unchanged,
so the split is by variable: whatever arrives as ``IndexedSlices`` (embedding lookups) is lazy.

Duplicates are summed through a row -> slot map (``unique_rows``), not with ``tf.unique``, which XLA cannot compile:
the step then compiles whole (``model.compile(jit_compile=True)``). The slot variables are Adam's and Adagrad's
(same names), so ``tf.train.Checkpoint``s move between the dense and the lazy optimizer, and updates go through
``distribute_strategy.extended.update`` like the parents' (``MirroredStrategy`` applies the all-gathered slices on
each replica; under ``ParameterServerStrategy`` the update runs beside the variable, so only the touched rows travel).

Row-wise Adagrad (``RowwiseAdagrad``, lazy: ``LazyRowwiseAdagrad``; FBGEMM's / TorchRec's ``rowwise_adagrad``) keeps
one accumulator per table row instead of one per weight, grown by the mean over the row's ``d`` columns of the
squared gradient:

    acc_r <- acc_r + (1/d) sum_c g_rc^2
    w_r   <- w_r - lr_t g_r / sqrt(acc_r + eps)

(tf-keras Adagrad's form: ``eps`` inside the root, accumulators start at ``initial_accumulator_value``). Its slots
are ``V`` floats per table instead of ``V * d`` (Adam: ``2 V d``), and a step reads and writes one ``[rows, d]``
block per table instead of three (Adam's weights and two moments): the cheapest update of a large table. Tables are
the rank-2 variables whose name matches ``table_pattern`` (Keras ``Embedding`` weights, ".../embeddings"); every
other variable gets ordinary Adagrad.
"""

from __future__ import annotations

import re
from typing import Optional

import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)

DENSE_FROM_SHARE = 0.5  # a table looked up by at least this many slots per row in a batch steps densely
CATCH_UP_TERMS = 128  # CatchUpAdam: the missed steps summed per row (the rest weigh under q^128 ~ 1.5e-6 each)


def unique_rows(gradient: tf.IndexedSlices, num_rows: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Sums the values of duplicate indices of ``gradient`` (indices into a table of ``num_rows`` rows): returns
    ``(values [n, ...], rows [n], first [n])`` for its ``n`` indices, where ``rows`` are the indices as given, slot
    ``j`` holds the sum of the values of every slot whose index is ``rows[j]``, and ``first`` (bool) marks one slot
    per distinct row. A row that occurs k times fills k slots with the same row and the same value, so that an update
    computed slot by slot is written with ``scatter_update`` (k identical writes) or, masked by ``first``, with
    ``scatter_add`` / ``scatter_sub`` (once).

    Without a sort: every slot writes its position to an ``[num_rows]`` int32 map at its row (one of the duplicates
    wins: which does not matter), reads the winner back as its row's segment id, and the values are summed by
    segment. XLA compiles it (``tf.unique`` does not compile; an XLA sort of 51,200 indices cost 12 ms on the
    2-core box against 5 ms for this). The map is 4 bytes per table row, a 1/128 of a ``[V, 128]`` table: the step's
    only work that grows with the table, a memset."""
    indices = gradient.indices
    n = tf.shape(indices)[0]
    owner = tf.tensor_scatter_nd_update(tf.zeros([num_rows], tf.int32), indices[:, tf.newaxis], tf.range(n))
    segment = tf.gather(owner, indices)
    summed = tf.gather(tf.math.unsorted_segment_sum(gradient.values, segment, n), segment)
    return summed, indices, tf.equal(segment, tf.range(n))


class _LazyRows:
    """Mixin over a tf-keras optimizer: ``IndexedSlices`` gradients go to ``_sparse_step(values, rows, variable)``
    with duplicates summed (``unique_rows``); dense gradients to the parent's ``update_step``. The parent's dense
    weight decay skips the variables that get sparse gradients; ``update_step`` decays their touched rows.

    A table whose batch looks up at least ``dense_from_share`` x its rows (slots, duplicates counted) gets the
    parent's dense step instead, decided per step: the lazy step's cost follows the slots (a gather and a scatter
    of three ``[slots, d]`` blocks at random rows), the dense one's the rows (streaming passes over the table), and
    a history table of 41k rows read by 51,200 slots a batch stepped 57 ms lazily against ~25 ms densely on the
    2-core box (JOURNAL.md, "Issue 47: lazy steps for the tables a batch barely touches"). ``None``: always lazy."""

    sparse_updates = True  # read by TwoTowerModel.train_step (keeps the slices) and recorded in the run

    def __init__(self, *args, dense_from_share: Optional[float] = DENSE_FROM_SHARE, **kwargs):
        super().__init__(*args, **kwargs)
        self.dense_from_share = dense_from_share

    def get_config(self) -> dict:
        return {**super().get_config(), "dense_from_share": self.dense_from_share}

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        sparse = {self._var_key(var) for grad, var in grads_and_vars if isinstance(grad, tf.IndexedSlices)}
        self._sparse_keys = getattr(self, "_sparse_keys", set()) | sparse
        return super().apply_gradients(grads_and_vars, *args, **kwargs)

    def _deduplicate_sparse_grad(self, grads):
        return grads  # summed in update_step, without tf.unique (see unique_rows)

    def _use_weight_decay(self, variable) -> bool:
        return self._var_key(variable) not in getattr(self, "_sparse_keys", ()) and self._decays(variable)

    def _decays(self, variable) -> bool:
        """Whether ``variable`` gets weight decay at all (``weight_decay`` set, not excluded)."""
        return self.weight_decay is not None and super()._use_weight_decay(variable)

    def update_step(self, gradient, variable):
        if not isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable)
        if self.dense_from_share is None:
            return self._lazy_step(gradient, variable)
        slots = tf.cast(tf.size(gradient.indices), tf.float32)
        tf.cond(slots >= self.dense_from_share * variable.shape[0], lambda: self._dense_step(gradient, variable),
                lambda: self._lazy_step(gradient, variable))

    def _dense_step(self, gradient: tf.IndexedSlices, variable: tf.Variable) -> None:
        """The parent's step on the summed dense gradient, with the weight decay the parent's ``apply_gradients``
        left out for this variable (its gradient arrived as slices)."""
        if self._decays(variable):
            variable.assign_sub(variable * tf.cast(self.weight_decay, variable.dtype)
                                * tf.cast(self.learning_rate, variable.dtype))
        dense = tf.math.unsorted_segment_sum(gradient.values, gradient.indices, tf.shape(variable)[0])
        super().update_step(dense, variable)

    def _lazy_step(self, gradient: tf.IndexedSlices, variable: tf.Variable) -> None:
        """The touched rows' step (module docstring)."""
        values, rows, first = unique_rows(gradient, variable.shape[0])
        lr = tf.cast(self.learning_rate, variable.dtype)
        decrement = self._sparse_step(values, rows, variable, lr)
        if self._decays(variable):
            decrement += tf.gather(variable, rows) * tf.cast(self.weight_decay, variable.dtype) * lr
        # Subtracted once per distinct row: without weight decay the rows' old weights are never read, which spares
        # a gather of [n, d] (a scatter_sub reads and writes each row in one pass).
        first = tf.reshape(tf.cast(first, variable.dtype), [-1] + [1] * (decrement.shape.rank - 1))
        variable.scatter_sub(tf.IndexedSlices(decrement * first, rows))

    def _sparse_step(self, gradient: tf.Tensor, rows: tf.Tensor, variable: tf.Variable, lr: tf.Tensor) -> tf.Tensor:
        """Updates the slots' ``rows`` for their summed ``gradient``; returns the decrement of the rows' weights
        (before weight decay, which ``update_step`` adds)."""
        raise NotImplementedError


def _slot_update(slot: tf.Variable, rows: tf.Tensor, value_fn) -> tf.Tensor:
    """Writes ``value_fn(slot[rows])`` to the slot's rows and returns it."""
    new = value_fn(tf.gather(slot, rows))
    slot.scatter_update(tf.IndexedSlices(new, rows))
    return new


@tf.keras.utils.register_keras_serializable(package="retrieval")
class LazyAdam(_LazyRows, tf.keras.optimizers.Adam):
    """Adam whose embedding-table steps touch only the looked-up rows (module docstring). Arguments: Adam's;
    ``amsgrad`` and ``adaptive_epsilon`` are not supported on the sparse rows."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.amsgrad or self.adaptive_epsilon:
            raise ValueError("LazyAdam supports neither amsgrad nor adaptive_epsilon")

    def _sparse_step(self, gradient, rows, variable, lr):
        step = tf.cast(self.iterations + 1, variable.dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, variable.dtype), tf.cast(self.beta_2, variable.dtype)
        alpha = lr * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        index = self._index_dict[self._var_key(variable)]
        momentum, velocity = self._momentums[index], self._velocities[index]
        owed, m, v = self._catch_up_rows(index, rows, tf.gather(momentum, rows), tf.gather(velocity, rows), lr)
        m = m + (gradient - m) * (1 - beta_1)
        v = v + (tf.square(gradient) - v) * (1 - beta_2)
        momentum.scatter_update(tf.IndexedSlices(m, rows))
        velocity.scatter_update(tf.IndexedSlices(v, rows))
        return owed + (m * alpha) / (tf.sqrt(v) + self.epsilon)

    def _catch_up_rows(self, index: int, rows: tf.Tensor, m: tf.Tensor, v: tf.Tensor,
                       lr: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The rows' moves owed from the steps they missed and their moments after them: none here (lazy Adam
        freezes an untouched row); ``CatchUpAdam`` pays them."""
        return tf.zeros_like(m), m, v


@tf.keras.utils.register_keras_serializable(package="retrieval")
class CatchUpAdam(LazyAdam):
    """Lazy Adam that moves each row, when it is next looked up, as dense Adam would have moved it while it was not:
    the step of dense Adam at the cost of the lazy one. Written here: neither Keras nor TensorFlow Addons has it.

    A row absent from a batch has a zero gradient, so dense Adam (Kingma & Ba 2015, Algorithm 1) decays its moments
    (``m <- b1 m``, ``v <- b2 v``) and still moves it by ``alpha_s m_s / (sqrt(v_s) + eps)``. Over the ``k`` steps
    ``s = l + 1 .. l + k`` after its last update at step ``l`` that is, in closed form,

        m_s = b1^j m,  v_s = b2^j v  (j = s - l),
        owed = lr m / (sqrt(v) + eps) * sum_{j=1}^{min(k, J)} q^j c(l + j),   q = b1 / sqrt(b2),
        c(s) = sqrt(1 - b2^s) / (1 - b1^s)                                    (Adam's bias correction at step s)

    which this optimizer pays (with ``m <- b1^k m``, ``v <- b2^k v``) just before the row's next update, and for
    every row at once in :meth:`catch_up` (training calls it at each epoch's end, before validation and checkpoints
    read the weights: ``training.CatchUpRows``). The sum is exact where dense Adam's would be, up to three
    approximations: the learning rate of the missed steps is the paying step's (exact for a constant rate; the
    schedule moves little over the ~30 steps that carry the sum's weight), ``eps`` is not scaled by
    ``b2^(-j/2)`` (it is ~1e-7 against ``sqrt(v)``), and terms past ``J`` = :data:`CATCH_UP_TERMS` are dropped (they
    weigh under ``q^J / (1 - q)`` ~ 1e-5 of the sum). Each row's last step is a ``[rows]`` slot ("last_step").
    Weight decay stays lazy (touched rows only). Without the catch-up, lazy Adam leaves a row looked up every 40th
    step (Gowalla's mid-tail items in in-batch softmax) about a tenth of dense Adam's motion: on Gowalla's holdout
    its towers read 0.1361 recall@20 after 3 epochs against dense Adam's 0.1435 (see
    JOURNAL.md, "Issue 47: lazy steps for the tables a batch barely touches")."""

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_last_steps_built", False):
            return
        self._last_steps_built = True
        self._last_steps = [self.add_variable_from_reference(var, "last_step", shape=var.shape[:1])
                            for var in var_list]

    def _owed_scale(self, last: tf.Tensor, now: tf.Tensor) -> tf.Tensor:
        """``sum_{j=1}^{min(now - last, J)} q^j c(last + j)`` per row (class docstring), for float ``last`` [n]."""
        beta_1, beta_2 = tf.cast(self.beta_1, last.dtype), tf.cast(self.beta_2, last.dtype)
        j = tf.range(1, CATCH_UP_TERMS + 1, dtype=last.dtype)
        steps = last[:, tf.newaxis] + j
        correction = tf.sqrt(1 - tf.pow(beta_2, steps)) / (1 - tf.pow(beta_1, steps))
        missed = tf.cast(j <= (now - last)[:, tf.newaxis], last.dtype)
        return tf.reduce_sum(tf.pow(beta_1 / tf.sqrt(beta_2), j) * correction * missed, axis=1)

    def _caught_up(self, last: tf.Tensor, now: tf.Tensor, m: tf.Tensor, v: tf.Tensor,
                   lr: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The moves owed by rows last updated at steps ``last`` through step ``now``, and their moments then."""
        beta_1, beta_2 = tf.cast(self.beta_1, m.dtype), tf.cast(self.beta_2, m.dtype)
        shape = [-1] + [1] * (m.shape.rank - 1)
        scale, missed = tf.reshape(self._owed_scale(last, now), shape), tf.reshape(now - last, shape)
        owed = lr * scale * m / (tf.sqrt(v) + self.epsilon)
        return owed, m * tf.pow(beta_1, missed), v * tf.pow(beta_2, missed)

    def _catch_up_rows(self, index, rows, m, v, lr):
        last_step = self._last_steps[index]
        now = tf.cast(self.iterations, m.dtype)  # the last step taken: this one is paid by the update itself
        owed, m, v = self._caught_up(tf.gather(last_step, rows), now, m, v, lr)
        last_step.scatter_update(tf.IndexedSlices(tf.fill(tf.shape(rows), now + 1), rows))
        return owed, m, v

    def _dense_step(self, gradient, variable):
        # Every row is taken as up to date: a table that steps densely steps so at every step (a history table
        # read by more slots than it has rows), except at an epoch's smaller last batch, after which training
        # catches up (CatchUpRows). Paying here too, under a condition, cost the XLA step 45 ms in copies of the
        # table on the 2-core box (a dense Adam step of 41k x 128 rows: ~25 ms).
        super()._dense_step(gradient, variable)
        last_step = self._last_steps[self._index_dict[self._var_key(variable)]]
        last_step.assign(tf.fill(tf.shape(last_step), tf.cast(self.iterations + 1, last_step.dtype)))

    def _catch_up_table(self, index: int, variable: tf.Variable, paid_to: tf.Tensor) -> None:
        """Pays every row of ``variable`` what it is owed through the last step taken; its rows are then up to
        date at step ``paid_to`` (a dense step's own, or the last one taken)."""
        momentum, velocity, last_step = self._momentums[index], self._velocities[index], self._last_steps[index]
        lr = tf.cast(self.learning_rate, variable.dtype)
        owed, m, v = self._caught_up(last_step, tf.cast(self.iterations, variable.dtype), momentum, velocity, lr)
        variable.assign_sub(owed)
        momentum.assign(m)
        velocity.assign(v)
        last_step.assign(tf.fill(tf.shape(last_step), tf.cast(paid_to, last_step.dtype)))

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        if not hasattr(self, "_tables"):
            self._tables = _Tables()
        self._tables.add(var for grad, var in grads_and_vars if isinstance(grad, tf.IndexedSlices))
        return super().apply_gradients(grads_and_vars, *args, **kwargs)

    def catch_up(self) -> None:
        """Pays every row of every table that got row slices what it is owed through the last step taken, so that
        the weights are dense Adam's (up to the class docstring's approximations): before reading them."""
        for variable in getattr(self, "_tables", _Tables()).variables:
            self._catch_up_table(self._index_dict[self._var_key(variable)], variable, self.iterations)


class _Tables:
    """The variables an optimizer got row slices for, held outside TensorFlow's attribute tracking (a list
    attribute of the optimizer would save the model's tables in its checkpoint a second time)."""

    def __init__(self):
        self.variables: list[tf.Variable] = []

    def add(self, variables) -> None:
        for variable in variables:
            if all(variable is not known for known in self.variables):
                self.variables.append(variable)


@tf.keras.utils.register_keras_serializable(package="retrieval")
class LazyAdagrad(_LazyRows, tf.keras.optimizers.Adagrad):
    """Adagrad whose embedding-table steps (weight decay included) touch only the looked-up rows. Arguments:
    Adagrad's."""

    def _sparse_step(self, gradient, rows, variable, lr):
        accumulator = self._accumulators[self._index_dict[self._var_key(variable)]]
        total = _slot_update(accumulator, rows, lambda old: old + self._squares(gradient, variable))
        return lr * gradient / tf.sqrt(total + self.epsilon)

    def _squares(self, gradient: tf.Tensor, variable: tf.Variable) -> tf.Tensor:
        """The accumulator's increment for ``variable``'s rows."""
        return tf.square(gradient)


@tf.keras.utils.register_keras_serializable(package="retrieval")
class RowwiseAdagrad(tf.keras.optimizers.Adagrad):
    """Adagrad with one accumulator per row of each embedding table (module docstring), dense: every step updates
    the whole table (a row absent from the batch has a zero gradient: its accumulator and weights stay, only weight
    decay moves it). Arguments: Adagrad's, and ``table_pattern``, a regular expression over variable names that
    selects the tables (rank 2)."""

    def __init__(self, *args, table_pattern: str = r"(^|/)embeddings(/|:|$)", **kwargs):
        super().__init__(*args, **kwargs)
        self.table_pattern = table_pattern

    def is_table(self, variable: tf.Variable) -> bool:
        """Whether ``variable`` gets a row-wise accumulator."""
        return variable.shape.rank == 2 and re.search(self.table_pattern, variable.name) is not None

    def build(self, var_list):
        tf.keras.optimizers.Optimizer.build(self, var_list)  # iterations, the index of the variables; not Adagrad's
        if getattr(self, "_built", False):
            return
        self._built = True
        self._accumulators = [
            self.add_variable_from_reference(var, "accumulator", initial_value=tf.fill(
                [var.shape[0], 1] if self.is_table(var) else var.shape,
                tf.constant(self.initial_accumulator_value, var.dtype)))
            for var in var_list]

    def _squares(self, gradient: tf.Tensor, variable: tf.Variable) -> tf.Tensor:
        """The accumulator's increment: squared gradient, averaged over the columns of a table's rows."""
        square = tf.square(gradient)
        return tf.reduce_mean(square, axis=1, keepdims=True) if self.is_table(variable) else square

    def update_step(self, gradient, variable):
        if not self.is_table(variable):
            return super().update_step(gradient, variable)
        accumulator = self._accumulators[self._index_dict[self._var_key(variable)]]
        gradient = tf.convert_to_tensor(gradient)
        accumulator.assign_add(self._squares(gradient, variable))
        variable.assign_sub(tf.cast(self.learning_rate, variable.dtype) * gradient
                            / tf.sqrt(accumulator + self.epsilon))

    def get_config(self) -> dict:
        return {**super().get_config(), "table_pattern": self.table_pattern}


@tf.keras.utils.register_keras_serializable(package="retrieval")
class LazyRowwiseAdagrad(_LazyRows, RowwiseAdagrad):
    """Row-wise Adagrad whose embedding-table steps (weight decay included) touch only the looked-up rows: the
    optimizer for the largest tables (one ``[rows, d]`` read and write per step, ``V`` floats of slots)."""

    _sparse_step = LazyAdagrad._sparse_step  # Adagrad's rows, with RowwiseAdagrad's row-mean ``_squares``
