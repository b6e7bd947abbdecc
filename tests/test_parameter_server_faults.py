"""Parameter-server faults: a lost ps task, or the last worker, ends the chief within ``train.ps_timeout_s`` with
exit 2 and one line (the watchdog, on fakes), and on a local cluster whose only worker is killed mid-training."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval import parameter_server
from tests.localhost import free_ports
from tests.test_parameter_server import listening

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 3.0


class Fakes:
    """A clock advanced by hand and a probe answering from a set of live addresses."""

    def __init__(self, live):
        self.now, self.live, self.lost = 0.0, set(live), []

    def watchdog(self, cluster):
        return parameter_server.Watchdog(cluster, TIMEOUT_S, probe=lambda a: a in self.live,
                                         on_lost=self.lost.append, clock=lambda: self.now)


CLUSTER = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1", "p:2"]}


def test_a_lost_ps_task_stops_the_chief_after_the_timeout():
    fakes = Fakes({"w:1", "w:2", "p:1", "p:2"})
    watchdog = fakes.watchdog(CLUSTER)
    assert watchdog.check() is None
    fakes.live.discard("p:2")
    fakes.now = TIMEOUT_S  # unreachable for exactly the timeout: not yet
    assert watchdog.check() is None
    fakes.now = TIMEOUT_S + 1
    assert watchdog.check() == "ps task 1 (p:2) unreachable for 4 s (train.ps_timeout_s = 3)"


def test_one_lost_worker_is_tolerated_the_last_one_is_not(caplog):
    fakes = Fakes({"w:1", "w:2", "p:1", "p:2"})
    watchdog = fakes.watchdog(CLUSTER)
    fakes.live.discard("w:1")
    fakes.now = 10.0
    with caplog.at_level("WARNING"):
        assert watchdog.check() is None
    assert "worker 0 (w:1) unreachable for 10 s; training goes on" in caplog.text
    fakes.live.discard("w:2")
    fakes.now = 12.0
    assert watchdog.check() is None  # w:2 was seen 2 s ago
    fakes.now = 14.0
    assert watchdog.check() == "no worker reachable for 4 s (w:1, w:2; train.ps_timeout_s = 3)"


def test_a_task_that_comes_back_resets_its_clock():
    fakes = Fakes({"w:1", "p:1"})
    watchdog = fakes.watchdog({"worker": ["w:1"], "ps": ["p:1"]})
    fakes.live.discard("p:1")
    fakes.now = 2.0
    assert watchdog.check() is None
    fakes.live.add("p:1")
    fakes.now = 4.0
    assert watchdog.check() is None
    fakes.live.discard("p:1")
    fakes.now = 6.0
    assert watchdog.check() is None  # seen at 4


def test_the_watchdog_thread_calls_on_lost_once():
    fakes = Fakes(set())
    watchdog = parameter_server.Watchdog({"worker": ["w:1"], "ps": ["p:1"]}, 0.05, interval_s=0.01,
                                         probe=lambda a: False, on_lost=fakes.lost.append)
    watchdog.start()
    deadline = time.monotonic() + 10
    while not fakes.lost and time.monotonic() < deadline:
        time.sleep(0.01)
    watchdog.stop()
    assert len(fakes.lost) == 1 and fakes.lost[0].startswith("ps task 0 (p:1) unreachable")


CHIEF = r"""
import json, os, sys
ports, out, timeout_s = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
del sys.argv[1:]  # the command line of a pipeline's chief, run as the pipelines run it (retrieval.cli.run)
cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"], "ps": [f"127.0.0.1:{ports[2]}"]}
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
import retrieval
import numpy as np
import tensorflow as tf

tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=0, protocol="grpc",
                     config=tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4), start=True)

from retrieval import cli, distributed, training
from retrieval.data.vocab import Vocabulary
from retrieval.models import build_model, default_config

strategy = distributed.make_strategy("parameter_server")
items = Vocabulary.from_ids([f"i{k}" for k in range(40)])
users = Vocabulary.from_ids([f"u{k}" for k in range(256)])
rng = np.random.default_rng(0)
examples = {"user": np.arange(256, dtype=np.int32) + 2, "history": rng.integers(2, 42, (256, 5)).astype(np.int32),
            "history_length": np.full(256, 5, np.int32), "label": rng.integers(2, 42, 256).astype(np.int32)}
config = default_config()
config.embedding_dim, config.item_tower.id_embedding_dim, config.user_tower.hidden_units = 8, 8, ()
config.user_tower.use_example_age = False
train = training.default_train_config()
train.batch_size, train.epochs, train.schedule, train.warmup_steps = 32, 10_000, "constant", 0
train.checkpoint_every_steps, train.log_every_steps, train.ps_timeout_s = 8, 8, timeout_s
with strategy.scope():
    model = build_model(config, items, users)


cli.run(lambda argv: training.fit(model, examples, train, checkpoint_dir=os.path.join(out, "checkpoints")))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="local cluster test")
def test_the_chief_ends_with_exit_2_when_its_only_worker_dies(tmp_path):
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "ps": [f"127.0.0.1:{ports[2]}"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    worker = subprocess.Popen([sys.executable, "-m", "retrieval.parameter_server"], cwd=ROOT,
                              env={**env, "TF_CONFIG": json.dumps({"cluster": cluster,
                                                                   "task": {"type": "worker", "index": 0}})},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chief = None
    try:
        deadline = time.monotonic() + 120
        while not listening(ports[1]):
            assert worker.poll() is None and time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.2)
        chief = subprocess.Popen([sys.executable, "-c", CHIEF, json.dumps(ports), str(tmp_path), str(TIMEOUT_S)],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not any((tmp_path / "checkpoints").glob("ckpt*.index")):  # training runs
            assert chief.poll() is None, chief.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        worker.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = chief.communicate(timeout=120)
        elapsed = time.monotonic() - killed
    finally:
        for process in (worker, chief):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    print(f"the chief exited {elapsed:.1f} s after its only worker was killed (timeout {TIMEOUT_S} s)")
    assert chief.returncode == 2, stderr[-3000:]
    # Whichever sees the loss first: the watchdog (after train.ps_timeout_s), or the coordinator raising it from a
    # step's logs (sooner on a loaded machine; retrieval.cli turns it into the same kind of line).
    assert ("parameter-server training stopped: no worker reachable" in stderr
            or "parameter-server training stopped: a task of the cluster is unreachable" in stderr), stderr[-3000:]
    assert stderr.count("parameter-server training stopped") == 1  # said once
    assert "rerun the same run id to resume" in stderr
    assert elapsed < TIMEOUT_S + 30, elapsed
    assert any((tmp_path / "checkpoints").glob("ckpt*")), "no checkpoint to resume from"


def test_a_lost_ps_task_raising_in_the_chief_exits_2_with_one_line():
    """Before the watchdog's timeout, the coordinator may raise the loss itself (a killed ps task): one line, exit 2,
    no traceback, as the watchdog's own stop."""
    code = ("import retrieval, tensorflow as tf\nfrom retrieval import cli\n"
            "def main(argv):\n    raise tf.errors.UnavailableError(None, None, 'Socket closed\\n"
            "Additional GRPC error information from remote target /job:ps/replica:0/task:0')\ncli.run(main)\n")
    # A user's environment, not this process's: ``import retrieval`` here set TensorFlow's log level for itself.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "RETRIEVAL_QUIET_TF")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**env, "PYTHONPATH": str(ROOT), "TF_CONFIG": json.dumps(
                                {"cluster": CLUSTER, "task": {"type": "chief", "index": 0}})})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "error: parameter-server training stopped: a task of the cluster is unreachable (Socket closed Additional GRPC "
        "error information from remote target /job:ps/replica:0/task:0); the run keeps its last checkpoint: restart "
        "the lost task and rerun the same run id to resume"]
