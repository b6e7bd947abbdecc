"""Lazy Adam / Adagrad (retrieval.optimizers) against a NumPy reference of the same rule: touched rows move, untouched
rows and their slots stay, duplicate indices are summed, dense variables get tf-keras Adam; eagerly, in a
tf.function, XLA-compiled, under MirroredStrategy (2 logical CPUs) and ParameterServerStrategy (local cluster), the
latter two in fresh processes (devices and clusters are per process). Slots survive a checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from retrieval import training
from retrieval.errors import InputError
from retrieval.optimizers import CatchUpAdam, LazyAdagrad, LazyAdam, LazyRowwiseAdagrad, RowwiseAdagrad, unique_rows
from tests.localhost import free_ports

ROOT = Path(__file__).resolve().parents[1]
ROWS, DIM, STEPS, LR, WD = 32, 3, 5, 0.05, 0.1  # 6 slots a step: lazy (under DENSE_FROM_SHARE x 32)
LAZY = {"adam": LazyAdam, "adagrad": LazyAdagrad, "rowwise_adagrad": LazyRowwiseAdagrad}


def gradients(seed: int = 0, steps: int = STEPS, replicas: int = 1):
    """Per step and replica: 6 indices into rows 0..7 (duplicates likely; rows 8.. never touched), their values,
    and a dense gradient of a [4] vector."""
    rng = np.random.default_rng(seed)
    return [[(rng.integers(0, 8, 6), rng.normal(size=(6, DIM)).astype(np.float32),
              rng.normal(size=4).astype(np.float32)) for _ in range(replicas)] for _ in range(steps)]


def reference(kind: str, table: np.ndarray, steps, weight_decay: float = 0.0) -> tuple[np.ndarray, list]:
    """The lazy rule in NumPy (retrieval/optimizers.py docstring), float64: returns the table and its slots."""
    w, m, v = table.astype(np.float64), np.zeros(table.shape), np.zeros(table.shape)
    acc = np.full(table.shape if kind == "adagrad" else (table.shape[0], 1), 0.1)  # tf-keras Adagrad's initial value
    for t, replicas in enumerate(steps, start=1):
        indices = np.concatenate([r[0] for r in replicas])
        values = np.concatenate([r[1] for r in replicas]).astype(np.float64)
        rows = np.unique(indices)
        g = np.zeros((len(rows), table.shape[1]))
        np.add.at(g, np.searchsorted(rows, indices), values)
        w[rows] -= LR * weight_decay * w[rows]
        if kind == "adam":
            m[rows] = 0.9 * m[rows] + 0.1 * g
            v[rows] = 0.999 * v[rows] + 0.001 * g ** 2
            alpha = LR * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            w[rows] -= alpha * m[rows] / (np.sqrt(v[rows]) + 1e-7)
        else:  # adagrad; rowwise_adagrad: one accumulator per row, the mean of the row's squared gradient
            acc[rows] += g ** 2 if kind == "adagrad" else np.mean(g ** 2, axis=1, keepdims=True)
            w[rows] -= LR * g / np.sqrt(acc[rows] + 1e-7)
    return w, ([m, v] if kind == "adam" else [acc])


def initial_table(rows: int = ROWS) -> np.ndarray:
    return np.random.default_rng(1).normal(size=(rows, DIM)).astype(np.float32)


def train(optimizer, steps, mode: str = "eager", rows: int = ROWS):
    """Applies ``steps`` as (IndexedSlices, dense) gradients to a [rows, DIM] table and a [4] vector."""
    table, dense = tf.Variable(initial_table(rows), name="embeddings"), tf.Variable(np.ones(4, np.float32))

    def apply(indices, values, dense_gradient):
        optimizer.apply_gradients([(tf.IndexedSlices(values, indices, tf.constant([rows, DIM])), table),
                                   (dense_gradient, dense)])

    step = apply if mode == "eager" else tf.function(apply, jit_compile=mode == "xla")
    for ((indices, values, dense_gradient),) in steps:
        step(tf.constant(indices, tf.int32), tf.constant(values), tf.constant(dense_gradient))
    return table, dense


@pytest.mark.parametrize("jit", [False, True])
def test_unique_rows_gives_every_slot_its_rows_sum_and_marks_one_slot_per_row(jit):
    dedupe = tf.function(lambda gradient: unique_rows(gradient, 6), jit_compile=jit)
    values, rows, first = dedupe(tf.IndexedSlices(tf.constant([[1.0], [2.0], [3.0], [4.0]]),
                                                  tf.constant([5, 2, 5, 0])))
    np.testing.assert_array_equal(rows.numpy(), [5, 2, 5, 0])
    np.testing.assert_array_equal(values.numpy().ravel(), [4.0, 2.0, 4.0, 4.0])
    assert first.numpy()[[1, 3]].all() and first.numpy()[[0, 2]].sum() == 1  # one of row 5's two slots


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
@pytest.mark.parametrize("kind", ["adam", "adagrad", "rowwise_adagrad"])
def test_lazy_update_equals_the_reference(kind, mode):
    steps = gradients()
    optimizer = LAZY[kind](LR, weight_decay=WD)
    table, _ = train(optimizer, steps, mode)
    expected, slots = reference(kind, initial_table(), steps, weight_decay=WD)
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(table.numpy()[8:], initial_table()[8:])  # untouched rows: unchanged
    got = [optimizer._momentums[0], optimizer._velocities[0]] if kind == "adam" else [optimizer._accumulators[0]]
    for slot, want in zip(got, slots, strict=True):
        np.testing.assert_allclose(slot.numpy(), want, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(slot.numpy()[8:], want[8:].astype(np.float32))  # and their slots untouched


@pytest.mark.parametrize("lazy_class,keras_class", [(LazyAdam, tf.keras.optimizers.Adam),
                                                     (LazyRowwiseAdagrad, tf.keras.optimizers.Adagrad)])
def test_dense_variables_get_the_keras_update(lazy_class, keras_class):
    steps = gradients()
    _, lazy = train(lazy_class(LR, weight_decay=WD), steps)
    dense = tf.Variable(np.ones(4, np.float32))
    keras = keras_class(LR, weight_decay=WD)
    for ((_, _, gradient),) in steps:
        keras.apply_gradients([(tf.constant(gradient), dense)])
    np.testing.assert_allclose(lazy.numpy(), dense.numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
@pytest.mark.parametrize("kind,keras_class", [("adam", tf.keras.optimizers.Adam),
                                               ("adagrad", tf.keras.optimizers.Adagrad)])
def test_a_table_looked_up_by_half_its_rows_in_slots_gets_the_dense_step(kind, keras_class, mode):
    """6 slots a step into 12 rows (DENSE_FROM_SHARE 0.5): Keras's own dense update, weight decay included, every
    row moving; with ``dense_from_share=None`` the same steps stay lazy (untouched rows keep their values)."""
    steps = gradients()
    table, _ = train(LAZY[kind](LR, weight_decay=WD), steps, mode, rows=12)
    keras, expected = keras_class(LR, weight_decay=WD), tf.Variable(initial_table(12))
    for ((indices, values, _),) in steps:
        dense = np.zeros((12, DIM), np.float32)
        np.add.at(dense, indices, values)
        keras.apply_gradients([(tf.constant(dense), expected)])
    np.testing.assert_allclose(table.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    lazy, _ = train(LAZY[kind](LR, weight_decay=WD, dense_from_share=None), steps, mode, rows=12)
    np.testing.assert_allclose(lazy.numpy(), reference(kind, initial_table(12), steps, weight_decay=WD)[0],
                               rtol=1e-5, atol=1e-6)


def sparse_gradients(steps: int = 300, seed: int = 3):
    """Per step 3 slots into rows 0..15 of 32, the higher rows ever rarer (gaps of well over CATCH_UP_TERMS steps
    between two lookups of row 15), and a dense gradient of a [4] vector."""
    rng = np.random.default_rng(seed)
    weights = 0.6 ** np.arange(16)
    return [[(rng.choice(16, 3, p=weights / weights.sum()), rng.normal(size=(3, DIM)).astype(np.float32),
              rng.normal(size=4).astype(np.float32))] for _ in range(steps)]


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_catch_up_adam_steps_as_dense_adam(mode):
    """CatchUpAdam with its rows caught up (at an 'epoch end' halfway and at the end) leaves the table and both
    moments where Keras's dense Adam does (a constant learning rate, no weight decay: the class docstring's exact
    case), where lazy Adam, given the same steps, does not. The step after the halfway catch-up looks up 20 slots
    (at least DENSE_FROM_SHARE x 32 rows): a dense step, as a history table's are, amid the lazy ones."""
    steps = sparse_gradients()
    rng = np.random.default_rng(4)
    steps[150] = [(rng.integers(0, 16, 20), rng.normal(size=(20, DIM)).astype(np.float32), steps[150][0][2])]
    optimizer = CatchUpAdam(LR)
    table, dense = tf.Variable(initial_table(), name="embeddings"), tf.Variable(np.ones(4, np.float32))

    def apply(indices, values, dense_gradient):
        optimizer.apply_gradients([(tf.IndexedSlices(values, indices, tf.constant([ROWS, DIM])), table),
                                   (dense_gradient, dense)])

    step = apply if mode == "eager" else tf.function(apply, jit_compile=mode == "xla")
    for number, ((indices, values, dense_gradient),) in enumerate(steps, start=1):
        step(tf.constant(indices, tf.int32), tf.constant(values), tf.constant(dense_gradient))
        if number in (len(steps) // 2, len(steps)):
            optimizer.catch_up()
    keras, expected = tf.keras.optimizers.Adam(LR), tf.Variable(initial_table())
    for ((indices, values, _),) in steps:
        gradient = np.zeros((ROWS, DIM), np.float32)
        np.add.at(gradient, indices, values)
        keras.apply_gradients([(tf.constant(gradient), expected)])
    np.testing.assert_allclose(table.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(optimizer._momentums[0].numpy(), keras._momentums[0].numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(optimizer._velocities[0].numpy(), keras._velocities[0].numpy(), rtol=1e-4, atol=1e-9)
    np.testing.assert_array_equal(table.numpy()[16:], initial_table()[16:])  # never looked up: never moved
    lazy, _ = train(LazyAdam(LR), steps, mode)
    assert np.abs(lazy.numpy() - expected.numpy())[:16].max() > 100 * np.abs(table.numpy() - expected.numpy()).max()


@pytest.mark.parametrize("mode", ["eager", "xla"])
def test_dense_rowwise_adagrad_equals_the_reference(mode):
    """Without weight decay, the dense row-wise step leaves untouched rows alone: it equals the lazy reference,
    with a [rows, 1] accumulator for the table and none of that shape for the dense vector."""
    optimizer = RowwiseAdagrad(LR)
    table, _ = train(optimizer, gradients(), mode)
    expected, (accumulator,) = reference("rowwise_adagrad", initial_table(), gradients())
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(optimizer._accumulators[0].numpy(), accumulator, rtol=1e-5)
    assert optimizer._accumulators[1].shape == [4]


def test_dense_adam_differs_on_untouched_rows():
    """The point of the lazy rule: Keras Adam moves rows a batch never looked up (decayed momentum)."""
    table, _ = train(tf.keras.optimizers.Adam(LR), gradients())
    assert not np.allclose(table.numpy()[:8], reference("adam", initial_table(), gradients())[0][:8])


def test_slots_survive_a_checkpoint(tmp_path):
    steps = gradients()
    optimizer = LazyAdam(LR)
    table, dense = train(optimizer, steps[:3])
    path = tf.train.Checkpoint(optimizer=optimizer, table=table, dense=dense).save(str(tmp_path / "ckpt"))
    restored_optimizer = LazyAdam(LR)
    restored_table, restored_dense = tf.Variable(tf.zeros([ROWS, DIM])), tf.Variable(tf.zeros(4))
    restored_optimizer.build([restored_table, restored_dense])
    tf.train.Checkpoint(optimizer=restored_optimizer, table=restored_table, dense=restored_dense).restore(
        path).assert_consumed()
    for saved, loaded in zip(optimizer.variables, restored_optimizer.variables, strict=True):
        np.testing.assert_array_equal(saved.numpy(), loaded.numpy())
    for ((indices, values, gradient),) in steps[3:]:  # resumed: the same result as an uninterrupted run
        restored_optimizer.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(indices, tf.int32),
                                                              tf.constant([ROWS, DIM])), restored_table),
                                            (tf.constant(gradient), restored_dense)])
    np.testing.assert_allclose(restored_table.numpy(), reference("adam", initial_table(), steps)[0], rtol=1e-5,
                               atol=1e-6)


def test_sparse_updates_resolution():
    config = training.default_train_config()
    small, large = tf.keras.Sequential([tf.keras.layers.Embedding(4000, 2)]), tf.keras.Sequential(
        [tf.keras.layers.Embedding(training.SPARSE_UPDATES_MIN_ROWS, 2)])
    assert config.sparse_updates == "auto"
    assert not training.use_sparse_updates(config, small) and training.use_sparse_updates(config, large)
    config.sparse_updates = "on"
    assert training.use_sparse_updates(config, small)
    assert isinstance(training.make_optimizer(config, 10, sparse=True), LazyAdam)
    config.optimizer = "adagrad"
    assert isinstance(training.make_optimizer(config, 10, sparse=True), LazyAdagrad)
    config.optimizer = "rowwise_adagrad"
    assert isinstance(training.make_optimizer(config, 10, sparse=True), LazyRowwiseAdagrad)
    assert type(training.make_optimizer(config, 10, sparse=False)) is RowwiseAdagrad
    config.sparse_updates = "sometimes"
    with pytest.raises(InputError, match="train.sparse_updates"):  # what training.fit checks first
        training.TRAIN.check(config)


# Run in a fresh process: prints the trained table (JSON) after applying the test's gradients under a strategy.
STRATEGY_SCRIPT = r"""
import json, os, sys
import numpy as np
kind, steps, ports = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
if kind == "parameter_server":
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "ps": [f"127.0.0.1:{p}" for p in ports[2:4]]}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
import retrieval
import tensorflow as tf
from retrieval import distributed
from retrieval import optimizers
if kind == "parameter_server":
    server_config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)
    for job, count in (("worker", 1), ("ps", 2)):
        for index in range(count):
            tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index, protocol="grpc",
                                 config=server_config, start=True)
    strategy = distributed.make_strategy("parameter_server", ps_min_shard_bytes=64)  # the table in 2 shards
else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
table0 = np.asarray(json.loads(sys.argv[4]), np.float32)
with strategy.scope():
    layer = tf.keras.layers.Embedding(*table0.shape, embeddings_initializer=tf.constant_initializer(table0))
    layer.build(None)
    optimizer = getattr(optimizers, sys.argv[7])(float(sys.argv[5]), weight_decay=float(sys.argv[6]))
R = strategy.num_replicas_in_sync
indices = tf.constant([[r[0] for r in step] for step in steps], tf.int32)  # [steps, replicas, n]
values = tf.constant([[r[1] for r in step] for step in steps], tf.float32)

@tf.function
def train_step(t):
    def replica_fn():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        with tf.GradientTape() as tape:  # d loss / d table[i] = values (summed over duplicates and replicas)
            loss = tf.reduce_sum(layer(indices[t, replica]) * values[t, replica])
        grads = tape.gradient(loss, layer.trainable_variables)
        assert all(isinstance(g, tf.IndexedSlices) for g in grads)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables))
    strategy.run(replica_fn)

if kind == "parameter_server":
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    for t in range(len(steps)):
        coordinator.schedule(train_step, args=(tf.constant(t),))
        coordinator.join()  # one step at a time: the reference is sequential
    shards = layer.embeddings.variables if hasattr(layer.embeddings, "variables") else [layer.embeddings]
    print("SHARDS", len(shards))
else:
    for t in range(len(steps)):
        train_step(tf.constant(t))
print("TABLE", json.dumps(tf.convert_to_tensor(layer.embeddings).numpy().tolist()))
"""


@pytest.mark.parametrize("optimizer", ["adam", "rowwise_adagrad"])
@pytest.mark.parametrize("kind,replicas", [("mirrored", 2), ("parameter_server", 1)])
def test_lazy_update_under_a_strategy_equals_the_reference(kind, replicas, optimizer):
    steps = gradients(seed=2, steps=4, replicas=replicas)
    as_json = [[(i.tolist(), v.tolist()) for i, v, _ in step] for step in steps]
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    env.pop("TF_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", STRATEGY_SCRIPT, kind, json.dumps(as_json),
                           json.dumps(free_ports(4)), json.dumps(initial_table().tolist()), str(LR), str(WD),
                           LAZY[optimizer].__name__],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("TABLE", "SHARDS")))
    if kind == "parameter_server":
        assert lines["SHARDS"] == "2"
    expected, _ = reference(optimizer, initial_table(), steps, weight_decay=WD)
    np.testing.assert_allclose(np.asarray(json.loads(lines["TABLE"])), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["adam", "rowwise_adagrad"])
def test_a_lazy_model_step_compiled_equals_the_uncompiled_one(optimizer):
    """training.fit with sparse updates on: the XLA-compiled step (the optimizer's row map, scatter_sub) moves every
    variable as the uncompiled one does; row-wise Adagrad gives the model's two tables [V, 1] accumulators."""
    from retrieval.data.vocab import Vocabulary
    from retrieval.models import build_model, default_config

    rng = np.random.default_rng(0)
    items = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, 30, 400)])
    users = Vocabulary.from_ids([f"u{k}" for k in range(10)])
    history = rng.integers(2, items.size, (64, 4)).astype(np.int32)
    examples = {"user": rng.integers(2, users.size, 64).astype(np.int32), "history": history,
                "history_length": np.full(64, 4, np.int32), "label": rng.integers(2, items.size, 64).astype(np.int32)}
    config = default_config()
    config.embedding_dim, config.item_tower.id_embedding_dim = 6, 6
    config.user_tower.hidden_units, config.user_tower.share_item_embeddings = (8,), False
    config.user_tower.history_embedding_dim = 6
    states = {}
    for jit in ("on", "off"):
        train = training.default_train_config()
        train.update(batch_size=16, epochs=2, learning_rate=0.05, warmup_steps=0, optimizer=optimizer,
                     sparse_updates="on", jit_compile=jit, weight_decay=0.01)
        model = build_model(config, items, users)
        training.fit(model, examples, train)
        assert model.optimizer.sparse_updates and model.jit_compile == (jit == "on")
        states[jit] = [v.numpy() for v in model.weights]
    for compiled, plain in zip(states["on"], states["off"], strict=True):
        np.testing.assert_allclose(compiled, plain, rtol=1e-4, atol=1e-5)
    if optimizer == "rowwise_adagrad":
        tables = [v for v in model.trainable_variables if v.name.endswith("embeddings:0")]
        assert len(tables) == 2
        for table in tables:
            accumulator = model.optimizer._accumulators[model.optimizer._index_dict[model.optimizer._var_key(table)]]
            assert accumulator.shape == [table.shape[0], 1]
