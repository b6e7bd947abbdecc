"""Next-item training examples as sharded TFRecord files, read back by ``tf.data`` without holding them in memory.

Writing (:func:`write_shard`): one file per data shard; its examples are permuted once (seeded) and cut into blocks of
:data:`BLOCK_ROWS`, one ``tf.train.Example`` per block (flat int64 lists ``user``, ``history`` (block x max_history),
``history_length``, ``label`` and float ``example_age`` when present), so serialisation costs one proto per block,
not per example. ``manifest.json`` records the files, the example count and the columns.

Reading (:meth:`ExampleShards.to_dataset`): the file names are shuffled per epoch, read by a deterministic parallel
``interleave`` of ``TFRecordDataset``, blocks go through a seeded shuffle buffer (``shuffle_buffer`` examples' worth),
are parsed, and ``rebatch`` cuts the stream into ``batch_size`` batches (a batch may span two epochs under ``repeat``).
Every element is a block, never a single example. Under ``MultiWorkerMirroredStrategy`` tf.data's AUTO sharding
finds the ``TFRecordDataset`` over a list of files and gives each worker its own files (keep ``data.num_shards`` a
multiple of the worker count).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping

import numpy as np

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
from retrieval import artifacts
from retrieval.data import examples as examples_lib
from retrieval.data.examples import BLOCK_ROWS, MANIFEST

INT_KEYS = ("user", "history", "history_length", "label")


def shard_file(directory: str | Path, shard: int) -> Path:
    return Path(directory) / f"part-{shard:05d}.tfrecord"


def write_shard(examples: Mapping[str, np.ndarray], path: str | Path, seed: int) -> int:
    """Writes ``examples`` (arrays as ``examples.next_item_examples`` returns) to ``path`` in a seeded random order,
    :data:`BLOCK_ROWS` per record, atomically; returns the number of examples."""
    import tensorflow as tf

    size = len(examples["label"])
    order = np.random.default_rng(seed).permutation(size)
    with artifacts.atomic_path(path) as tmp, tf.io.TFRecordWriter(str(tmp)) as writer:
        for start in range(0, size, BLOCK_ROWS):
            rows = order[start:start + BLOCK_ROWS]
            feature = {key: tf.train.Feature(int64_list=tf.train.Int64List(value=examples[key][rows].ravel()))
                       for key in INT_KEYS}
            if "example_age" in examples:
                feature["example_age"] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=examples["example_age"][rows]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return size


def write_manifest(directory: str | Path, files: list[str], num_examples: int, max_history: int,
                   example_age: bool, streamed: bool = False) -> None:
    """Writes the manifest :meth:`ExampleShards.load` reads; ``streamed``: whether the prepare ran on partitions."""
    artifacts.write_json(Path(directory) / MANIFEST, {"kind": "next_item", "files": files, "num_examples": num_examples,
                                                      "max_history": max_history, "example_age": example_age,
                                                      "streamed": streamed})


@dataclasses.dataclass(frozen=True)
class ExampleShards:
    """Next-item examples in TFRecord shards (see the module docstring); ``files`` relative to ``directory``."""

    directory: str
    files: tuple[str, ...]
    num_examples: int
    max_history: int
    example_age: bool
    shuffle_buffer: int = 65_536

    @classmethod
    def load(cls, directory: str | Path, shuffle_buffer: int = 65_536) -> ExampleShards:
        manifest = artifacts.read_json(Path(directory) / MANIFEST)
        return cls(str(directory), tuple(manifest["files"]), int(manifest["num_examples"]),
                   int(manifest["max_history"]), bool(manifest["example_age"]), shuffle_buffer)

    def __len__(self) -> int:
        return self.num_examples

    def in_memory(self) -> examples_lib.NextItemExamples:
        """Every example read into memory (the in-memory trainer's source; the file order, unshuffled)."""
        arrays = examples_lib.collect(self.to_dataset(1 << 16, shuffle=False))
        if not arrays:
            arrays = {key: np.zeros((0, self.max_history) if key == "history" else 0, np.int32) for key in INT_KEYS}
        return examples_lib.NextItemExamples(arrays)

    def _parse(self, record):
        import tensorflow as tf

        spec = {key: tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True) for key in INT_KEYS}
        if self.example_age:
            spec["example_age"] = tf.io.FixedLenSequenceFeature([], tf.float32, allow_missing=True)
        parsed = tf.io.parse_single_example(record, spec)
        out = {key: tf.cast(parsed[key], tf.int32) for key in INT_KEYS}
        out["history"] = tf.reshape(out["history"], [-1, self.max_history])
        if self.example_age:
            out["example_age"] = parsed["example_age"]
        return out

    def to_dataset(self, batch_size: int, shuffle: bool = True, seed: int = 0, repeat: bool = False):
        """``tf.data.Dataset`` of dict batches (the keys of ``examples.to_dataset``), streamed from the files;
        deterministic under ``seed`` (each epoch its own file and block order)."""
        import tensorflow as tf

        paths = [str(Path(self.directory) / name) for name in self.files]
        dataset = tf.data.Dataset.from_tensor_slices(paths)
        if shuffle:
            dataset = dataset.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.interleave(tf.data.TFRecordDataset, cycle_length=min(len(paths), 8),
                                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if shuffle:
            dataset = dataset.shuffle(max(self.shuffle_buffer // BLOCK_ROWS, 1), seed=seed + 1,
                                      reshuffle_each_iteration=True)
        if repeat:
            dataset = dataset.repeat()
        dataset = dataset.map(self._parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return dataset.rebatch(batch_size).prefetch(tf.data.AUTOTUNE)
