"""Distribution: cross-replica in-batch negatives give the single-replica loss and update; two local workers train in
lockstep (MultiWorkerMirroredStrategy). Each case runs in fresh processes: devices and strategies are per process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval import distributed
from retrieval.errors import InputError
from tests.localhost import free_ports

ROOT = Path(__file__).resolve().parents[1]

COMMON = """
import retrieval
import numpy as np
import tensorflow as tf
from retrieval.data.vocab import Vocabulary
from retrieval.models import build_model, default_config

rng = np.random.default_rng(0)
items = Vocabulary.from_ids([f"i{k}" for k in rng.zipf(1.6, 2000) % 30])
users = Vocabulary.from_ids([f"u{k}" for k in range(12)])
N = 64
history = rng.integers(0, items.size, (N, 5)).astype(np.int32)
examples = {"user": rng.integers(2, users.size, N).astype(np.int32), "history": history,
            "history_length": (history >= 2).sum(1).astype(np.int32),
            "label": rng.zipf(1.6, N).clip(max=items.size - 3).astype(np.int32) + 2}  # duplicates: accidental hits
config = default_config()
config.embedding_dim, config.item_tower.id_embedding_dim, config.user_tower.hidden_units = 8, 8, (16,)
config.objective.log_q = "estimated"
"""

REPLICAS = COMMON + """
import sys
from retrieval import training
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

def one_step(strategy):
    with strategy.scope():
        model = build_model(config, items, users)
        model.compile(optimizer=tf.keras.optimizers.SGD(1.0))
    training.build_variables(model, examples)
    before = [v.numpy() for v in model.trainable_variables]
    batch = tf.data.Dataset.from_tensor_slices({k: v[:16] for k, v in examples.items()}).batch(16)
    loss = model.fit(batch, epochs=1, verbose=0).history["loss"][0]
    after = [v.numpy() for v in model.trainable_variables]
    return loss, before, after, [v.numpy() for v in model.objective.estimator.weights]

mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert mirrored.num_replicas_in_sync == 2
single = one_step(tf.distribute.get_strategy())
replicated = one_step(mirrored)
gap = lambda a, b: max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))
# Per variable, relative to its largest magnitude (at least 1): the two runs add the same gradients in another order,
# so they may differ by a few float32 ulps of the weights (one ulp is 7.6e-6 at 70, this step's largest weight).
relative_gap = lambda a, b: max(float(np.abs(x - y).max() / max(np.abs(x).max(), 1.0)) for x, y in zip(a, b, strict=True))
np.savez(sys.argv[1], losses=[single[0], replicated[0]], initial_error=gap(single[1], replicated[1]),
         weight_change=gap(single[1], single[2]), weight_error=relative_gap(single[2], replicated[2]),
         estimator_error=gap(single[3], replicated[3]))
"""

WORKER = """
import json, os, sys
ports, index, out, checkpoints = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                      "task": {"type": "worker", "index": index}})
from retrieval import distributed
strategy = distributed.make_strategy("multi_worker")
""" + COMMON + """
from retrieval import training
with strategy.scope():
    model = build_model(config, items, users)
train = training.default_train_config()
train.batch_size, train.epochs, train.warmup_steps, train.checkpoint_every_steps = 16, 1, 0, 2
result = training.fit(model, examples, train, checkpoint_dir=checkpoints)
np.savez(out, step=result.step, *[v.numpy() for v in model.trainable_variables])
"""


def run_python(script: str, *args: str, timeout: float = 90) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, "-c", script, *args], check=True, timeout=timeout, cwd=ROOT, env=env)


def test_cross_replica_in_batch_loss_and_update_equal_single_replica(tmp_path):
    run_python(REPLICAS, str(tmp_path / "out.npz"))
    out = np.load(tmp_path / "out.npz")
    single, mirrored = out["losses"]
    assert single == pytest.approx(mirrored, rel=1e-5)
    assert float(out["initial_error"]) == 0.0
    assert float(out["weight_change"]) > 1e-3  # the step moved the weights, and both runs moved them alike
    assert float(out["weight_error"]) < 8 * np.finfo(np.float32).eps  # a few ulps, relative (see REPLICAS)
    assert float(out["estimator_error"]) == 0.0


def test_two_local_workers_end_with_identical_weights(tmp_path):
    ports = free_ports(2)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(ports), str(i), str(tmp_path / f"w{i}.npz"),
                                 str(tmp_path / "checkpoints")], cwd=ROOT, env=env) for i in range(2)]
    try:
        codes = [w.wait(timeout=90) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert codes == [0, 0]
    chief, other = np.load(tmp_path / "w0.npz"), np.load(tmp_path / "w1.npz")
    assert int(chief["step"]) == int(other["step"]) == 4
    arrays = [k for k in chief.files if k != "step"]
    assert arrays
    for key in arrays:
        np.testing.assert_array_equal(chief[key], other[key])
    assert tf_checkpoint_steps(tmp_path / "checkpoints") == [2, 4]  # the chief's; the other worker's were private


def tf_checkpoint_steps(directory: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in directory.glob("ckpt-*.index"))


def test_unknown_strategy_and_missing_tf_config_are_input_errors(monkeypatch):
    with pytest.raises(InputError):
        distributed.make_strategy("tpu")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(InputError):
        distributed.make_strategy("multi_worker")
