"""Distribution: the strategy named in the config, and the cross-replica helpers the objectives use.

Loss scaling follows the tf.distribute contract: each replica reduces its per-example losses by the *global* batch
size (``tf.nn.compute_average_loss``) and the optimizer sums the replicas' gradients, so the update equals the one of a
single replica on the global batch. In-batch negatives are gathered from every replica (``ReplicaContext.all_gather``,
whose gradient all-reduces and slices back to each replica's rows), so the global batch serves as negatives and the
loss does not depend on the number of replicas.

``parameter_server`` (``retrieval.parameter_server``) is the exception: its workers step asynchronously, each on its
own batch, against tables split across parameter servers; these helpers see one replica there.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval import parameter_server
from retrieval.errors import InputError
from retrieval.settings import STRATEGIES


def make_strategy(name: str, *, ps_shards: int = 0,
                  ps_min_shard_bytes: int = parameter_server.PS_MIN_SHARD_BYTES) -> tf.distribute.Strategy:
    """``default`` (one device), ``mirrored`` (all local GPUs, else the CPU), ``multi_worker`` (synchronous
    all-reduce across the workers described by the ``TF_CONFIG`` environment variable) or ``parameter_server``
    (the chief of a ``TF_CONFIG`` cluster with ps tasks; tables split into ``ps_shards`` shards of at least
    ``ps_min_shard_bytes``, see ``parameter_server.make_strategy``). Create it at program start, before any other
    TensorFlow op."""
    if name not in STRATEGIES:
        raise InputError(f"unknown strategy {name!r}; expected one of {STRATEGIES}", field="strategy")
    if name in ("multi_worker", "parameter_server") and "TF_CONFIG" not in os.environ:
        raise InputError(f"strategy {name!r} needs the TF_CONFIG environment variable", field="strategy")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return parameter_server.make_strategy(shards=ps_shards, min_shard_bytes=ps_min_shard_bytes)


def _replica_context() -> Optional[tf.distribute.ReplicaContext]:
    """The replica context when there is more than one replica in sync, else None."""
    context = tf.distribute.get_replica_context()
    return context if context is not None and context.num_replicas_in_sync > 1 else None


def global_batch_size(local_batch_size: tf.Tensor) -> tf.Tensor:
    """Sum of the replicas' batch sizes (exact also for an uneven last batch)."""
    context = _replica_context()
    size = tf.cast(local_batch_size, tf.int64)
    return size if context is None else context.all_reduce(tf.distribute.ReduceOp.SUM, size)


def average_loss(per_example_loss: tf.Tensor) -> tf.Tensor:
    """Per-example losses summed and divided by the global batch size (``tf.nn.compute_average_loss``)."""
    size = global_batch_size(tf.shape(per_example_loss)[0])
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=size)


def gather_other_replicas(value: Any) -> Optional[Any]:
    """The rows (axis 0) of ``value`` (a nest of tensors of equal leading size) held by the *other* replicas, in
    replica order; None on a single replica. Gradients flow back to the replica owning each row."""
    context = _replica_context()
    if context is None:
        return None
    local_size = tf.shape(tf.nest.flatten(value)[0])[:1]
    sizes = context.all_gather(local_size, axis=0)
    start = tf.reduce_sum(sizes[:context.replica_id_in_sync_group])
    end = start + local_size[0]

    def others(tensor: tf.Tensor) -> tf.Tensor:
        # One collective per tensor (a batched gather refuses a mix of host int32 and device tensors); the identity
        # places a replica's input tensor on its device (multi-worker collectives need a device).
        gathered = context.all_gather(tf.identity(tensor), axis=0)
        return tf.concat([gathered[:start], gathered[end:]], axis=0)

    return tf.nest.map_structure(others, value)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this worker writes the shared artifacts (checkpoints, TensorBoard); always true on one machine."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0
                                             and "chief" not in resolver.cluster_spec().as_dict())


def worker_path(path: Path, strategy: tf.distribute.Strategy) -> Path:
    """``path`` on the chief; a private temporary directory on other workers, which must still write (saving
    involves collective ops) but whose copy nobody reads."""
    if is_chief(strategy):
        return Path(path)
    return Path(tempfile.mkdtemp(prefix=f"worker{strategy.cluster_resolver.task_id}_{Path(path).name}_"))
