"""Parameter-server training on a local cluster (2 workers, 2 parameter servers, this process as the chief).

One subprocess (an in-process server cannot be stopped, and the cluster is per process) starts the four servers on
127.0.0.1, makes the strategy from ``TF_CONFIG`` as ``pipelines.train`` would, and trains a planted dataset through
``training.fit``: 4 groups of 10 items, every history and its label drawn from one group, so a model that learned
the groups ranks the label's 10-item group first (recall@10 near 1) where an untrained one is at chance (10/40).
It trains half the steps, resumes from the checkpoint in a new model for the rest, exports, and restores the last
checkpoint into a model without the strategy, exported too: this test compares the two exports.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval import distributed, export, parameter_server
from retrieval.errors import InputError
from tests.localhost import free_ports

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, os, sys
ports, out = json.loads(sys.argv[1]), sys.argv[2]
cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
           "ps": [f"127.0.0.1:{p}" for p in ports[3:5]]}
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
import retrieval
import numpy as np
import tensorflow as tf

# In-process servers share this machine's threads; with fewer inter-op threads than workers + 1 they can hang
# (TensorFlow's tutorial "Parameter server training with ParameterServerStrategy").
server_config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)
for job in ("worker", "ps"):
    for index in range(2):
        tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index, protocol="grpc",
                             config=server_config, start=True)

from retrieval import distributed, export, parameter_server, training
from retrieval.data.vocab import Vocabulary
from retrieval.models import build_model, default_config

strategy = distributed.make_strategy("parameter_server", ps_min_shard_bytes=256)

# Each worker keeps its own lane of the stream: 20 steps scheduled on either worker read 20 different batches.
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
creator = parameter_server.per_worker_dataset(lambda: tf.data.Dataset.range(1000), strategy)
lanes = coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(creator))
iterator = iter(lanes)
read = [coordinator.schedule(tf.function(lambda it: next(it)), args=(iterator,)) for _ in range(20)]
coordinator.join()
read = sorted(int(value.fetch()) for value in read)

rng = np.random.default_rng(0)
groups, per_group, n = 4, 10, 512
items = Vocabulary.from_ids([f"i{k}" for k in range(groups * per_group)])
users = Vocabulary.from_ids([f"u{k}" for k in range(n)])

def planted(count):
    group = rng.integers(0, groups, count)
    draws = np.argsort(rng.random((count, per_group)), axis=1)[:, :6] + (group * per_group)[:, None] + 2
    return {"user": np.arange(count, dtype=np.int32) + 2, "history": draws[:, 1:].astype(np.int32),
            "history_length": np.full(count, 5, np.int32), "label": draws[:, 0].astype(np.int32)}

examples, test = planted(n), planted(200)
config = default_config()
config.embedding_dim, config.item_tower.id_embedding_dim, config.user_tower.hidden_units = 8, 8, ()
config.user_tower.use_example_age, config.temperature = False, 0.2
config.objective.log_q = "estimated"
train = training.default_train_config()
train.batch_size, train.epochs, train.learning_rate, train.schedule, train.warmup_steps = 32, 3, 0.05, "constant", 0
train.checkpoint_every_steps, train.log_every_steps = 16, 16
checkpoints = os.path.join(out, "checkpoints")

def recall(model):
    users = model.user_vectors(tf.constant(test["user"]), tf.constant(test["history"])).numpy()
    top = np.argsort(-users @ model.catalogue_vectors().T, axis=1)[:, :10] + 2
    return float(np.mean([label in row for label, row in zip(test["label"], top)]))

with strategy.scope():
    model = build_model(config, items, users)
training.build_variables(model, examples)
initial = recall(model)
first = training.fit(model, examples, train, checkpoint_dir=checkpoints)
train.epochs = 6
with strategy.scope():
    model = build_model(config, items, users)
resumed = training.fit(model, examples, train, checkpoint_dir=checkpoints)
table = model.item_tower.id_embedding.embeddings
estimator = model.objective.estimator
export.export_two_tower(model, items, users, os.path.join(out, "ps_run"))

local = build_model(config, items, users)  # no strategy: the checkpoint restores outside the cluster
training.build_variables(local, examples)
tf.train.Checkpoint(model=local).restore(tf.train.latest_checkpoint(checkpoints)).expect_partial()
export.export_two_tower(local, items, users, os.path.join(out, "local_run"))
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump({"read": read, "initial_recall": initial, "recall": recall(model), "local_recall": recall(local),
               "steps": [first.step, resumed.step], "resumed_epochs": len(resumed.history["loss"]),
               "table": type(table).__name__, "shard_devices": [v.device for v in getattr(table, "variables", [])],
               "estimator_sharded": any(type(v).__name__ == "ShardedVariable" for v in estimator.weights),
               "estimator_step": int(estimator.step.numpy())}, f)
sys.stdout.flush()
os._exit(0)  # the in-process servers never stop
"""


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("ps")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(free_ports(5)), str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads((out / "result.json").read_text()), out


def test_workers_read_disjoint_lanes_of_the_stream(cluster_run):
    read = cluster_run[0]["read"]
    assert len(set(read)) == 20  # no batch read twice by the two workers
    assert any(value % 2 == 0 for value in read) and any(value % 2 == 1 for value in read)  # both lanes


def test_tables_are_split_across_the_parameter_servers(cluster_run):
    result = cluster_run[0]
    assert result["table"] == "ShardedVariable"
    assert sorted(device.split("/device")[0] for device in result["shard_devices"]) == [
        "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]
    assert not result["estimator_sharded"]  # rank-1 state stays whole on one ps task
    assert result["estimator_step"] == 96  # one update per worker step: 6 epochs of 16 steps


def test_training_converges_and_resumes_from_the_checkpoint(cluster_run):
    result = cluster_run[0]
    assert result["steps"] == [48, 96]
    assert result["resumed_epochs"] == 3  # the second fit restored step 48 and ran epochs 4-6 only
    assert result["initial_recall"] < 0.45  # chance: 0.25
    assert result["recall"] > 0.9
    assert result["local_recall"] == result["recall"]


def test_export_has_the_form_of_a_single_machine_export(cluster_run):
    out = cluster_run[1]
    ps_ids, ps_vectors = export.read_item_embeddings(out / "ps_run" / "item_embeddings.parquet")
    local_ids, local_vectors = export.read_item_embeddings(out / "local_run" / "item_embeddings.parquet")
    np.testing.assert_array_equal(ps_ids, local_ids)
    np.testing.assert_allclose(ps_vectors, local_vectors, rtol=1e-6)
    ps_encoder, local_encoder = (export.load_user_encoder(out / run) for run in ("ps_run", "local_run"))
    for encoder in (ps_encoder, local_encoder):
        signature = encoder._serve
        assert sorted(signature.structured_input_signature[1]) == ["history", "user_id"]
        assert list(signature.structured_outputs) == ["embedding"]
    histories = [["i1", "i2", "i3"], ["i30", "i31"], []]
    np.testing.assert_allclose(ps_encoder.encode(["u0", "u1", "u2"], histories),
                               local_encoder.encode(["u0", "u1", "u2"], histories), rtol=1e-5, atol=1e-6)


def test_parameter_server_needs_ps_and_worker_tasks_and_runs_on_the_chief(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(InputError):
        distributed.make_strategy("parameter_server")
    cluster = {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "chief": ["127.0.0.1:3"]}
    for task, tasks in (({"type": "worker", "index": 0}, cluster),
                        ({"type": "chief", "index": 0}, {"worker": cluster["worker"], "chief": cluster["chief"]})):
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": tasks, "task": task}))
        with pytest.raises(InputError):
            distributed.make_strategy("parameter_server")
    with pytest.raises(InputError):
        parameter_server.serve()  # the chief runs training, not a server


def test_server_tasks_start_with_the_module_entry_point():
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"], "ps": [f"127.0.0.1:{ports[2]}"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
           "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})}
    server = subprocess.Popen([sys.executable, "-m", "retrieval.parameter_server"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not listening(ports[2]):
            assert server.poll() is None and time.monotonic() < deadline, "the ps task did not start its server"
            time.sleep(0.2)
        assert server.poll() is None  # serving until killed
    finally:
        server.kill()
        server.wait()


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_partitioner_splits_only_large_floating_tables():
    import tensorflow as tf

    partition = parameter_server.table_partitioner(max_shards=4, min_shard_bytes=1024)
    assert partition(tf.TensorShape([1000, 8]), tf.float32) == [4, 1]  # 32 KB: as many shards as allowed
    assert partition(tf.TensorShape([48, 8]), tf.float32) == [2, 1]  # 1.5 KB: two shards
    assert partition(tf.TensorShape([32, 8]), tf.float32) == [1, 1]  # 1 KB: whole
    assert partition(tf.TensorShape([100000]), tf.float32) == [1]  # rank 1: frequency estimator state
    assert partition(tf.TensorShape([1000, 8]), tf.int32) == [1, 1]  # integer feature table
