"""Parameter-server training: ``tf.distribute.ParameterServerStrategy`` for id embedding tables larger than a worker.

The all-reduce strategies (``mirrored``, ``multi_worker``) keep a full copy of every table on every replica. Here the
large tables are split by rows across the ``ps`` tasks (``ShardedVariable``: an embedding lookup reads only the rows
it needs from the shard that holds them), and the workers run training steps that the chief schedules
(``tf.distribute.experimental.coordinator.ClusterCoordinator``, created by Keras ``fit``).

Roles (``TF_CONFIG``): the ``chief`` runs the program (``pipelines.train``); every ``worker`` and ``ps`` task runs only a
TensorFlow server (``python -m retrieval.parameter_server``), since the chief ships the functions they execute.

What changes against the all-reduce strategies:

* Steps are asynchronous: each step is one worker's batch of ``batch_size`` examples, applied to the variables on
  the parameter servers without waiting for the other workers. A worker holds one replica (its CPU, or GPU), so the
  loss is averaged over that batch (``distributed.average_loss`` sees one replica) and in-batch negatives are that
  worker's batch. ``epochs * ceil(examples / batch_size)`` steps still make ``epochs`` passes over the examples.
* Input (``per_worker_dataset``): every worker builds the same deterministic stream of batches and keeps every
  ``W``-th one (``Dataset.shard`` with a lane drawn from a counter on the parameter servers), so together the workers
  read each batch once. Which worker runs which step, and in which order the updates land, is not deterministic.
* XLA is off (``training.use_jit_compile``): the steps run on remote workers against remote variables.
* The frequency estimator's state (rank-1 arrays) stays whole on one ``ps`` task (``table_partitioner``
  splits rank-2 tables only). Its step counts worker steps, so it estimates the probability that an item is in one
  worker's batch, the batch of that worker's in-batch softmax. Its read-modify-write is not atomic across workers:
  two workers updating the same bucket at once keep one of the two updates (a little noise, no error).
* Checkpoints save each ``ShardedVariable`` as one tensor, so they restore under any strategy and any number of
  shards. The export writes the same files as the other strategies: item vectors are computed on the chief through
  the same lookups, and the user tower's tables are copied whole into the SavedModel (``unsharded``), so the chief
  must hold them in memory once, as serving does.

Faults (:class:`Watchdog`, started by :class:`Synchronize` for the length of ``fit``): TensorFlow's coordinator retries
a step on another worker when one is lost, but with no worker left, or a ps task lost, it waits for the task to come
back, without limit ("Cluster now being recovered"). The watchdog probes every task's address once a second (a TCP
connect) and, once a ps task, or every worker, has been unreachable for ``train.ps_timeout_s``, ends the chief with
exit 2 and one line naming the task. The run stays resumable: its last checkpoint is intact (the stage markers and
the checkpoint are written atomically), so rerunning the run id once the tasks are back resumes from it. A lost
worker while others remain is logged and training goes on with the others.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from typing import Callable, Iterator, Mapping, NoReturn, Optional, Sequence

import tensorflow as tf
from absl import logging

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.errors import EXIT_INPUT_ERROR, LOST_TASK_ADVICE, InputError
from retrieval.periodic import Periodic
from retrieval.settings import PS_MIN_SHARD_BYTES, PS_TIMEOUT_S

SERVER_ROLES = ("worker", "ps")
PROBE_TIMEOUT_S = 1.0

Partitioner = Callable[[tf.TensorShape, tf.DType], list]


def table_partitioner(max_shards: int, min_shard_bytes: int = PS_MIN_SHARD_BYTES) -> Partitioner:
    """A ``variable_partitioner`` that splits floating rank-2 variables (embedding tables, and dense kernels as large)
    of ``S`` bytes by rows into ``min(max_shards, ceil(S / min_shard_bytes))`` shards (``MinSizePartitioner``), so
    tables up to ``min_shard_bytes`` stay whole; every other variable stays whole too: rank-1 state (the frequency
    estimator's arrays, biases), integer feature tables."""
    inner = tf.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=min_shard_bytes,
                                                                       max_shards=max_shards)

    def partition(shape: tf.TensorShape, dtype: tf.DType) -> list:
        if shape.rank != 2 or not tf.as_dtype(dtype).is_floating:
            return [1] * shape.rank
        return inner(shape, dtype)

    return partition


def _task_counts(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> dict:
    spec = resolver.cluster_spec()
    return {job: spec.num_tasks(job) for job in spec.jobs}


def make_strategy(resolver: Optional[tf.distribute.cluster_resolver.ClusterResolver] = None, *, shards: int = 0,
                  min_shard_bytes: int = PS_MIN_SHARD_BYTES) -> tf.distribute.ParameterServerStrategy:
    """The strategy of the chief (the coordinator), connected to the cluster of ``resolver`` (default: the
    ``TF_CONFIG`` environment variable). Tables are split into ``shards`` shards (0: one per ``ps`` task).

    Raises:
      InputError: the cluster has no ``ps`` or no ``worker`` task, or this process is a worker or ps task (those
        run ``serve``).
    """
    resolver = resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
    counts = _task_counts(resolver)
    if not counts.get("ps") or not counts.get("worker"):
        raise InputError(f"strategy 'parameter_server' needs 'ps' and 'worker' tasks in TF_CONFIG, got {counts}",
                         field="strategy")
    if resolver.task_type in SERVER_ROLES:
        raise InputError(f"this process is task {resolver.task_type}:{resolver.task_id}; worker and ps tasks run "
                         "`python -m retrieval.parameter_server`, the chief runs the training", field="strategy")
    partitioner = table_partitioner(shards or counts["ps"], min_shard_bytes)
    return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def uses_coordinator(strategy: tf.distribute.Strategy) -> bool:
    """Whether steps of ``strategy`` are scheduled on remote workers (parameter-server training)."""
    return isinstance(strategy, tf.distribute.ParameterServerStrategy)


def num_workers() -> int:
    """The number of worker tasks of the cluster this process (the coordinator) is connected to."""
    return len({device.name.split("/device:")[0] for device in tf.config.list_logical_devices()
                if device.name.startswith("/job:worker/")})


def per_worker_dataset(make_dataset: Callable[[], tf.data.Dataset],
                       strategy: tf.distribute.ParameterServerStrategy) -> tf.keras.utils.experimental.DatasetCreator:
    """The input of ``Model.fit`` under ``strategy``: each worker runs ``make_dataset`` (a deterministic stream of
    batches) and keeps every ``W``-th batch, starting at its lane.

    The dataset function is traced once and run on every worker, so a worker cannot learn its index from Python;
    its lane is drawn from a counter on the parameter servers when its dataset is created. A worker that is restarted
    draws a new lane (modulo ``W``), which may repeat a live worker's: batches are then read twice, none is lost
    for long (the stream repeats).
    """
    workers = num_workers()
    with strategy.scope():
        counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_lanes")

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        del input_context  # one input pipeline per worker: nothing to split within it
        lane = counter.assign_add(1, read_value=True) - 1
        return make_dataset().shard(workers, tf.math.floormod(lane, workers))

    return tf.keras.utils.experimental.DatasetCreator(dataset_fn)


def reachable(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout_s`` (a task's server is listening)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    return True


def stop_chief(reason: str) -> NoReturn:
    """Ends this process at once with exit 2 and one line: the coordinator's wait cannot be interrupted from Python,
    and the run is left as a crash leaves it, resumable from its last checkpoint."""
    message = f"parameter-server training stopped: {reason}; {LOST_TASK_ADVICE}"
    print(f"error: {message}", file=sys.stderr, flush=True)  # once: not logged as well
    os._exit(EXIT_INPUT_ERROR)


class Watchdog:
    """Probes the ``ps`` and ``worker`` tasks of ``cluster`` (job -> addresses) every ``interval_s`` seconds in a
    daemon thread and calls ``on_lost(reason)`` once a ps task, or every worker, has been unreachable for
    ``timeout_s`` (module docstring); a lost worker with others still reachable is logged once."""

    def __init__(self, cluster: Mapping[str, Sequence[str]], timeout_s: float, interval_s: float = 1.0,
                 probe: Callable[[str], bool] = reachable, on_lost: Callable[[str], None] = stop_chief,
                 clock: Callable[[], float] = time.monotonic):
        self.tasks = {(job, index): address for job in SERVER_ROLES
                      for index, address in enumerate(cluster.get(job, ()))}
        self.timeout_s, self.interval_s = timeout_s, interval_s
        self._probe, self._on_lost, self._clock = probe, on_lost, clock
        self._last_seen = dict.fromkeys(self.tasks, clock())
        self._warned: set = set()
        self._watcher = Periodic(self._watch, interval_s, "ps-watchdog")

    def check(self) -> Optional[str]:
        """Probes every task once; the reason to stop, or None."""
        now = self._clock()
        for task, address in self.tasks.items():
            if self._probe(address):
                self._last_seen[task] = now
        lost = {task: now - seen for task, seen in self._last_seen.items() if now - seen > self.timeout_s}
        for (job, index), gone in lost.items():
            if job == "ps":
                return (f"ps task {index} ({self.tasks[job, index]}) unreachable for {gone:.0f} s "
                        f"(train.ps_timeout_s = {self.timeout_s:g})")
        workers = [task for task in self.tasks if task[0] == "worker"]
        if workers and all(task in lost for task in workers):
            return (f"no worker reachable for {min(lost[task] for task in workers):.0f} s ("
                    f"{', '.join(self.tasks[task] for task in workers)}; train.ps_timeout_s = {self.timeout_s:g})")
        for task in set(lost) - self._warned:
            logging.warning("worker %d (%s) unreachable for %.0f s; training goes on with the other workers",
                            task[1], self.tasks[task], lost[task])
        self._warned = set(lost)
        return None

    def _watch(self) -> bool:
        reason = self.check()
        if reason is not None:
            self._on_lost(reason)
        return reason is not None

    def start(self) -> None:
        self._last_seen = dict.fromkeys(self.tasks, self._clock())
        self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()


class Synchronize(tf.keras.callbacks.Callback):
    """Waits for the scheduled steps to finish at the end of every epoch and of training, so that the callbacks
    after it (evaluation, early stopping, the final checkpoint) see the weights of every step; and watches the
    cluster's tasks while training runs (:class:`Watchdog`, ``timeout_s``). Put it first."""

    def __init__(self, strategy: tf.distribute.ParameterServerStrategy, timeout_s: float = PS_TIMEOUT_S):
        super().__init__()
        self._coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)  # the strategy's own
        # The strategy's resolver (its public ``cluster_resolver`` is None under ParameterServerStrategyV2).
        self._watchdog = Watchdog(strategy._cluster_resolver.cluster_spec().as_dict(), timeout_s)

    def on_train_begin(self, logs=None):
        self._watchdog.start()

    def on_epoch_end(self, epoch, logs=None):
        self._coordinator.join()

    def on_train_end(self, logs=None):
        self._coordinator.join()
        self._watchdog.stop()


@contextlib.contextmanager
def unsharded(module: tf.Module) -> Iterator[list[tf.Variable]]:
    """Within the context, each ``ShardedVariable`` held by ``module`` or its submodules (a Keras layer's
    ``embeddings``) is replaced by one plain variable of this process holding its value. Yields the variables that
    ``module`` now reads (its own, the copies instead of the shards) and puts the sharded ones back on exit.

    ``tf.saved_model.load`` cannot restore functions that read a ``ShardedVariable``, so the export traces its
    functions inside this context: the SavedModel then holds whole tables, as under the other strategies. The swap
    bypasses Keras attribute tracking, so the model's weights and checkpoints never see the copies.
    """
    swapped = []
    for owner in (module, *module.submodules):
        for name, value in list(vars(owner).items()):
            if isinstance(value, tf.__internal__.distribute.ShardedVariable):
                copy = tf.Variable(tf.convert_to_tensor(value), trainable=False, name=value.name.split(":")[0])
                swapped.append((owner, name, value, copy))
                object.__setattr__(owner, name, copy)
    shards = {id(shard) for _, _, value, _ in swapped for shard in value.variables}
    try:
        yield [v for v in module.variables if id(v) not in shards] + [copy for _, _, _, copy in swapped]
    finally:
        for owner, name, value, _ in swapped:
            object.__setattr__(owner, name, value)


def serve(resolver: Optional[tf.distribute.cluster_resolver.ClusterResolver] = None) -> NoReturn:
    """Runs the TensorFlow server of this worker or ps task (from ``TF_CONFIG``) until the process is killed."""
    resolver = resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type not in SERVER_ROLES:
        raise InputError(f"TF_CONFIG names task {resolver.task_type!r}; only {SERVER_ROLES} tasks run a server "
                         "(the chief runs pipelines.train)", field="TF_CONFIG")
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    logging.info("serving %s:%d at %s", resolver.task_type, resolver.task_id, server.target)
    server.join()
    sys.exit(0)


if __name__ == "__main__":
    from retrieval import cli

    cli.run(lambda argv: serve())
