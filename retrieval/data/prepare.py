"""The prepare stage: interaction log(s) -> split -> vocabularies -> training examples, as one set of tasks.

The same tasks run whatever the size of the log; only the number of partitions and the engine change::

    train file (+ test, validation files with split=files)
      1. partition   one task per file: read in record batches (``readers.interaction_batches``, any format), each
                     row written to the partition hash(user id) mod P: every user's rows land in one partition
      2. split       one task per partition: order, split per user (or by the global cut-off, or by file), write the
                     parts; return the training counts
      3. vocabulary  here: counts summed over the partitions -> ``Vocabulary.from_counts``
      4. examples    one task per partition: held-out rows aligned to the vocabularies (one rule: the user has
                     training rows and the item is in the item vocabulary, i.e. after ``min_item_count``), then the
                     partition's next-item examples (TFRecord, :mod:`shards`) or set-data pairs (:mod:`set_examples`)
      5. combine     here: the parts appended to ``data/train|test(|validation).parquet``, one partition at a time

``data.streaming`` sets P: ``off`` -> 1 (the in-memory path: the same tasks on one partition), ``on`` ->
``data.num_shards`` (peak memory follows one partition, not the log), ``auto`` -> on for a log of at least
``data.streaming_min_mb``. ``data.engine`` sets where tasks run: this process, or a Dask cluster. Randomness is keyed
per user (:mod:`seeds`) and the temporal cut-off is computed from summed timestamp counts, so every P and engine
gives the same vocabularies, test pairs and training pairs for one config (``tests/test_data_prepare.py``).
Training reads the examples through :func:`load_examples` (an :class:`examples.ExampleSource`): held in memory when
the prepare was not streamed, streamed from the shard files when it was.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from pathlib import Path
from typing import Iterator, Optional

import ml_collections
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from absl import logging

from retrieval import artifacts
from retrieval.data import catalogue as catalogue_lib
from retrieval.data import examples as examples_lib
from retrieval.data import features as features_lib
from retrieval.data import order as order_lib
from retrieval.data import readers, seeds, set_examples, shards, splits
from retrieval.data.engine import Engine
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError

MODES = ("auto", "on", "off")
SPLITS = tuple(splits.SPLITS)  # the registry's names, in its order
TIME_SPLITS = splits.TIME_SPLITS
PARTS = ("train", "test", "validation")
TUNING_PARTS = ("tuning_train", "tuning_validation")  # the automatic holdout: training data minus a validation part
NEXT_ITEM, SET, NO_EXAMPLES = "next_item", "set", "no_examples"  # what training reads; Item2Vec reads the table
EXAMPLE_KINDS = (NEXT_ITEM, SET, NO_EXAMPLES)


def streamed(data: ml_collections.ConfigDict) -> bool:
    """``data.streaming``: ``on``, ``off``, or ``auto`` (on when the training log is at least
    ``data.streaming_min_mb``)."""
    if data.streaming != "auto":
        return data.streaming == "on"
    path = Path(data.train_path)
    return path.is_file() and path.stat().st_size >= data.streaming_min_mb * (1 << 20)


@dataclasses.dataclass(frozen=True)
class TrainingNeeds:
    """What the data stage needs to know of the model and its training, which it does not read itself (the hand-off
    reads them from ``config.model``, ``config.train`` and the model type: ``retrieval.data.handoff``)."""

    examples: str = NEXT_ITEM  # NEXT_ITEM (two-tower: next-item or set examples, by the order) or NO_EXAMPLES
    seed: int = 0
    max_history: int = 50  # the examples' history length
    example_age: bool = False  # the examples carry their age (model.user_tower.use_example_age)
    tuning_fraction: float = 0.0  # > 0: hold out this share of each user's training items for early stopping
    tuning_users: int = 0  # > 0: sequences hold out the last item of a seeded sample of this many users, not of all


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a task needs (picklable: tasks may run in other processes)."""

    sources: tuple[tuple[str, str], ...]  # (part, path): the training log, and with split=files the held-out files
    format: str  # data.format (``auto``: guessed per file)
    columns: readers.ColumnNames
    run_dir: str  # artifacts.RunPaths root: vocabularies and data/ go there
    num_shards: int
    split: str
    holdout_n: int = 1
    validation: bool = False
    holdout_fraction: float = 0.2
    temporal_quantile: float = 0.9
    unknown_policy: str = "keep"
    min_item_count: int = 1
    seed: int = 0
    max_history: int = 50
    example_age: bool = False
    max_examples_per_user: Optional[int] = None
    examples: str = NEXT_ITEM  # what training reads: NEXT_ITEM or SET (decided by the order), or NO_EXAMPLES
    tuning_fraction: float = 0.0  # > 0: hold out a validation part of the training data (see :func:`_tuning_split`)
    tuning_users: int = 0  # train.sequence_holdout_users (see :func:`_tuning_split`)
    order: str = "time"
    has_time: bool = True
    item_features_path: str = ""  # data.item_features_path: its specs are saved; with catalogue_from_table, its ids
    item_features: str = ""  # data.item_features (the declared columns and kinds)
    catalogue_from_table: bool = False  # data.catalogue == "item_features" and a table is given
    cold_item_fraction: float = 0.0  # data.cold_item_fraction (catalogue.cold_holdout)

    @classmethod
    def from_data(cls, data: ml_collections.ConfigDict, run_dir: str | Path, needs: TrainingNeeds,
                  num_shards: Optional[int] = None) -> Settings:
        """The settings of a run's ``config.data`` and what its training needs of the data (``needs``, which the
        hand-off reads from the rest of the config: ``retrieval.data.handoff.settings_of``); ``num_shards`` defaults
        to ``data.num_shards`` when streamed, else 1."""
        d = data
        if d.split not in SPLITS:
            raise InputError(f"unknown split {d.split!r}; expected one of {SPLITS}", field="data.split")
        sources = [("train", str(d.train_path))]
        if d.split == "files":
            if not d.test_path:
                raise InputError("split 'files' needs data.test_path", field="data.test_path")
            sources.append(("test", str(d.test_path)))
            if d.validation_path:
                sources.append(("validation", str(d.validation_path)))
        if num_shards is None:
            num_shards = int(d.num_shards) if streamed(d) else 1
        columns = readers.ColumnNames(user=d.user_column, item=d.item_column, timestamp=d.timestamp_column or None)
        examples = needs.examples
        return cls(tuple(sources), d.format, columns, str(run_dir), int(num_shards), d.split, int(d.holdout_n),
                   bool(d.validation), float(d.holdout_fraction), float(d.temporal_quantile), d.unknown_policy,
                   int(d.min_item_count), needs.seed, needs.max_history, needs.example_age,
                   d.max_examples_per_user or None, examples,
                   needs.tuning_fraction if examples != NO_EXAMPLES else 0.0, needs.tuning_users,
                   item_features_path=str(d.item_features_path), item_features=str(d.item_features),
                   catalogue_from_table=bool(d.item_features_path) and d.catalogue == "item_features"
                   and examples != NO_EXAMPLES,
                   cold_item_fraction=float(d.cold_item_fraction))

    @property
    def is_set(self) -> bool:
        """Whether the (decided) order makes the data sets: set examples, a random holdout for tuning."""
        return order_lib.is_set(self.order)

    @property
    def train_path(self) -> str:
        return self.sources[0][1]

    @property
    def paths(self) -> artifacts.RunPaths:
        return artifacts.RunPaths(self.run_dir)

    @property
    def partitions(self) -> Path:
        return self.paths.train_data.parent / "partitions"

    @property
    def examples_dir(self) -> Path:
        return examples_dir(self.paths)

    def part(self, name: str, shard: int) -> Path:
        return self.paths.train_data.parent / "parts" / f"{name}-{shard:05d}.parquet"

    def source_of(self, part: str) -> str:
        return dict(self.sources).get(part, self.train_path)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What the stage wrote: counts, the order decision and the training examples (kind, shards, count)."""

    train_interactions: int
    test_interactions: int
    validation_interactions: int
    users: int
    items: int
    dropped: dict
    order: dict
    examples: dict  # kind, count, shards, streamed
    tuning: Optional[dict] = None  # the automatic validation holdout (train.validation_fraction), when made
    catalogue: Optional[dict] = None  # items, warm, cold and where the catalogue came from

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def has_validation_data(data: ml_collections.ConfigDict) -> bool:
    """Whether the config gives validation data: a validation file, or leave_last_n's validation part."""
    return bool(data.split == "files" and data.validation_path) or bool(data.split == "leave_last_n"
                                                                       and data.validation)


def examples_dir(paths: artifacts.RunPaths, tuning: bool = False) -> Path:
    """Where a run's example shards live (next-item TFRecords, or set pairs); ``tuning``: those of the training data
    minus the automatic validation holdout."""
    return paths.train_data.parent / ("tuning" if tuning else "") / "examples"


def tuning_data(paths: artifacts.RunPaths, part: str) -> Path:
    """``data/tuning/train.parquet`` or ``validation.parquet``: the automatic holdout's two parts."""
    return paths.train_data.parent / "tuning" / f"{part}.parquet"


def set_shard_file(directory: str | Path, shard: int) -> Path:
    return Path(directory) / f"set-{shard:05d}.bin"


def shard_of(user_ids: pd.Series, num_shards: int) -> np.ndarray:
    """Partition of each user id: a hash of the string that is the same in every process and on every machine."""
    return (pd.util.hash_array(user_ids.to_numpy(dtype=object)) % np.uint64(num_shards)).astype(np.int32)


# ------------------------------------------------------------------ 1. partition
def _conform(frame: pd.DataFrame, part: str, has_time: bool) -> pd.DataFrame:
    """One schema for every partition file: the training log's columns (a held-out file without timestamps gets 0:
    held-out rows are never ordered), the file row and the part."""
    columns = ["user_id", "item_id"] + (["timestamp"] if has_time else []) + ["row"]
    if has_time and "timestamp" not in frame:
        frame = frame.assign(timestamp=np.zeros(len(frame), np.int64))
    return frame[columns].assign(part=part)


def partition(settings: Settings, number: int, part: str, path: str) -> dict:
    """Task 1: writes the file's rows into the partitions; returns the row count, for the training log of a
    temporal split the distinct timestamps with their counts (the cut-off is a quantile over all of them), and for
    a sampled sequence holdout the smallest user keys (:func:`_tuning_threshold`)."""
    count, times = 0, pd.Series([], dtype=np.int64)
    keys = np.zeros(0)
    sample = part == "train" and _samples_users(settings)

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal count, times, keys
        for frame in readers.interaction_batches(path, settings.format, settings.columns):
            frame = _conform(frame, part, settings.has_time)
            if settings.split == "temporal" and part == "train":  # summed as it grows: memory ~ distinct times
                batch_times = pd.Series(frame["timestamp"].to_numpy()).value_counts(sort=False)
                times = pd.concat([times, batch_times]).groupby(level=0).sum()
            if sample:  # one more than the sample (to tell whether there are more users): memory ~ the sample
                keys = np.union1d(keys, _user_keys(settings, frame["user_id"]))[:settings.tuning_users + 1]
            frame["shard"] = shard_of(frame["user_id"], settings.num_shards)
            count += len(frame)
            yield from pa.Table.from_pandas(frame, preserve_index=False).to_batches()

    stream = batches()
    first = next(stream, None)
    if first is not None:
        reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], stream))
        ds.write_dataset(reader, settings.partitions, format="parquet",
                         partitioning=ds.partitioning(pa.schema([("shard", pa.int32())]), flavor="hive"),
                         basename_template=f"{part}-{number:03d}-{{i}}.parquet",
                         existing_data_behavior="overwrite_or_ignore")
    return {"part": part, "rows": count, "times": times, "user_keys": keys}


def _samples_users(settings: Settings) -> bool:
    """Whether the automatic holdout is the last item of a sample of users (sequences, ``tuning_users`` > 0)."""
    return settings.tuning_fraction > 0 and settings.tuning_users > 0 and not settings.is_set


def _user_keys(settings: Settings, user_ids: pd.Series) -> np.ndarray:
    """Each row's user key in [0, 1): seeded, one per user id, the tuning holdout's own stream."""
    return seeds.id_uniforms(user_ids, settings.seed, seeds.TUNING)


def _tuning_threshold(settings: Settings, read: list[dict]) -> Optional[float]:
    """The largest user key of the sampled sequence holdout: the ``tuning_users`` smallest keys of all training
    users (a bottom-k sample: the same users for every partitioning and engine), or None for every user (sets, no
    sample, or no more users than the sample: :func:`partition` kept no keys, or at most that many)."""
    keys = np.unique(np.concatenate([r["user_keys"] for r in read if r["part"] == "train"] or [np.zeros(0)]))
    return float(keys[settings.tuning_users - 1]) if len(keys) > settings.tuning_users else None


# ------------------------------------------------------------------ 2. split
def _read_partition(settings: Settings, shard: int) -> pd.DataFrame:
    """The partition's rows sorted by (user, time, file row): each user's rows in time order, ties in file order."""
    directory = settings.partitions / f"shard={shard}"
    if not directory.exists():
        empty = {"user_id": pd.Series([], dtype=object), "item_id": pd.Series([], dtype=object)}
        if settings.has_time:
            empty["timestamp"] = np.zeros(0, np.int64)
        return pd.DataFrame({**empty, "row": np.zeros(0, np.int64), "part": pd.Series([], dtype=object)})
    frame = ds.dataset(directory, format="parquet").to_table().to_pandas()
    for column in ("user_id", "item_id", "part"):
        frame[column] = frame[column].astype(object)
    keys = ["part", "user_id"] + (["timestamp"] if settings.has_time else []) + ["row"]
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def _split(settings: Settings, frame: pd.DataFrame, cutoff: Optional[int]) -> splits.Split:
    """The partition's split (held-out rows kept: :func:`example_shard` aligns them to the vocabularies)."""
    train = frame[frame["part"] == "train"].reset_index(drop=True)
    if settings.is_set:
        train = order_lib.shuffle_within_users(train, settings.seed)
    if settings.split == "files":
        held = {name: frame[frame["part"] == name].reset_index(drop=True) for name in PARTS[1:]}
        return splits.Split(train, held["test"], held["validation"] if dict(settings.sources).get("validation")
                            else None)
    if train.empty:
        return splits.Split(train, train, train if settings.validation else None)
    return splits.SPLITS[settings.split].hold_out(train, splits.Holdout.of(settings, cutoff=cutoff, partition=True))


def split_shard(settings: Settings, shard: int, cutoff: Optional[int] = None,
                tuning_threshold: Optional[float] = None) -> dict:
    """Task 2: splits the partition's users, writes the parts; returns training counts, the time span and the parts'
    sizes. ``tuning_threshold``: the sampled sequence holdout's largest user key (:func:`_tuning_threshold`)."""
    split = catalogue_lib.cold_holdout(_split(settings, _read_partition(settings, shard), cutoff),
                                       settings.cold_item_fraction, settings.seed)
    parts = {name: getattr(split, name) for name in PARTS}
    if settings.tuning_fraction > 0:
        parts.update(zip(TUNING_PARTS, _tuning_split(settings, split.train, tuning_threshold), strict=True))
    rows = {}
    for name, part in parts.items():
        if part is not None:
            _write(part.drop(columns=["part"], errors="ignore"), settings.part(name, shard))
            rows[name] = len(part)
    train = split.train
    times = train["timestamp"].to_numpy() if "timestamp" in train else np.zeros(0, np.int64)
    return {"items": train["item_id"].value_counts(sort=False), "users": train["user_id"].value_counts(sort=False),
            "time": (int(times.min(initial=np.iinfo(np.int64).max)), int(times.max(initial=np.iinfo(np.int64).min))),
            "rows": rows}


def _tuning_split(settings: Settings, train: pd.DataFrame,
                  threshold: Optional[float] = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The automatic validation holdout of the training part (``train.validation_fraction``): for sets a random
    ``fraction`` of each user's items (keyed per user, its own stream), for sequences the last item of each user
    whose key is at most ``threshold`` (a seeded sample of ``train.sequence_holdout_users``; every user without a
    threshold); users too short to give one keep all. Training on the rest early-stops on it; the final model refits
    on all of it (or, with a sampled sequence holdout, may be the tuned model: it trained on the other users' last
    items too)."""
    if train.empty:
        return train, train
    if settings.is_set:
        held = splits.random_holdout(train, settings.tuning_fraction, seed=settings.seed, policy="keep",
                                     salt=seeds.TUNING)
    else:
        among = None if threshold is None else _user_keys(settings, train["user_id"]) <= threshold
        held = splits.leave_last_n_out(train, 1, policy="keep", among=among)
    return held.train, held.test


def _write(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.drop(columns=["shard"], errors="ignore").reset_index(drop=True).to_parquet(path, index=False)


# ------------------------------------------------------------------ 4. examples
def _user_indices(user_vocab_path: Path, users: pd.Series) -> np.ndarray:
    """Vocabulary indices of ``users``, reading only their rows of the saved user vocabulary (bounded memory)."""
    wanted = pa.array(pd.unique(users.to_numpy(dtype=object)), pa.string())
    table = ds.dataset(user_vocab_path, format="parquet").to_table(columns=["index", "id"],
                                                                   filter=ds.field("id").isin(wanted))
    found = pd.Index(table.column("id").to_numpy(zero_copy_only=False)).get_indexer(users.to_numpy(dtype=object))
    return table.column("index").to_numpy()[found]


def _align(settings: Settings, name: str, frame: pd.DataFrame, known: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """``data.unknown_policy`` on a held-out part; a ``fail`` names the row of the file it was read from."""
    try:
        return splits.align_to_train(frame, known, settings.unknown_policy, path=settings.source_of(name), name=name)
    except InputError as e:
        row = None if e.row is None else int(frame["row"].iloc[e.row])
        raise InputError(e.message, path=e.path, column=e.column, row=row) from None


def example_shard(settings: Settings, shard: int, time_span: tuple[int, int]) -> dict:
    """Task 4: aligns the held-out parts to the vocabularies and writes the partition's training examples."""
    item_vocab = Vocabulary.load(settings.paths.item_vocab)
    train = pd.read_parquet(settings.part("train", shard))
    known = pd.DataFrame({"user_id": train["user_id"].drop_duplicates().reset_index(drop=True),
                          "item_id": pd.Series(item_vocab.ids[NUM_RESERVED:])})
    dropped = {}
    for name in PARTS[1:]:
        path = settings.part(name, shard)
        if path.exists():
            aligned, dropped[name] = _align(settings, name, pd.read_parquet(path), known)
            _write(aligned, path)
    out = {"dropped": dropped, "examples": 0, "tuning_examples": 0}
    if settings.examples == NO_EXAMPLES:
        return out
    out["examples"] = _write_examples(settings, shard, train, item_vocab, settings.examples_dir, time_span)
    if settings.tuning_fraction > 0:
        tuning = pd.read_parquet(settings.part("tuning_train", shard))
        out["tuning_examples"] = _write_examples(settings, shard, tuning, item_vocab,
                                                 examples_dir(settings.paths, tuning=True), time_span)
    return out


def _write_examples(settings: Settings, shard: int, train: pd.DataFrame, item_vocab: Vocabulary, directory: Path,
                    time_span: tuple[int, int]) -> int:
    """Writes the partition's training examples of ``train`` into ``directory``; returns their number."""
    users = _user_indices(settings.paths.user_vocab, train["user_id"])
    items = item_vocab.lookup(train["item_id"].to_numpy())
    if settings.examples == SET:
        return set_examples.write_set_shard(users, items, set_shard_file(directory, shard))
    timestamps = train["timestamp"].to_numpy() if "timestamp" in train else None
    built = examples_lib.next_item_examples(
        users, items, timestamps, max_history=settings.max_history,
        example_age=settings.example_age and timestamps is not None,
        max_examples_per_user=settings.max_examples_per_user, seed=settings.seed)
    if "example_age" in built and len(timestamps):  # rescale the partition's span to the log's
        low, high = float(timestamps.min()), float(timestamps.max())
        age_seconds = built["example_age"].astype(np.float64) * max(high - low, 1.0) + (time_span[1] - high)
        built["example_age"] = (age_seconds / max(time_span[1] - time_span[0], 1.0)).astype(np.float32)
    return shards.write_shard(built, shards.shard_file(directory, shard), settings.seed + shard)


# ------------------------------------------------------------------ driver
def _clean(settings: Settings) -> None:
    """Removes the intermediate partitions and parts (a rerun of the stage starts from the log)."""
    shutil.rmtree(settings.partitions, ignore_errors=True)
    shutil.rmtree(settings.part("train", 0).parent, ignore_errors=True)


def _append(settings: Settings, name: str, target: Path) -> Optional[int]:
    """Appends the partitions' ``name`` parts (without the file row) to the Parquet file ``target``, one partition in
    memory at a time, atomically; None when no partition has the part."""
    paths = [settings.part(name, shard) for shard in range(settings.num_shards)]
    paths = [path for path in paths if path.exists()]
    if not paths:
        return None
    # an empty partition's columns have no type to cast from
    paths = [path for path in paths if pq.ParquetFile(path).metadata.num_rows] or paths[:1]
    schema = pq.read_schema(paths[0])
    schema = schema.remove(schema.get_field_index("row"))
    rows = 0
    with artifacts.atomic_path(target) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for path in paths:
            table = pq.read_table(path, columns=schema.names).cast(schema)
            writer.write_table(table)
            rows += table.num_rows
    return rows


def _head(settings: Settings) -> pd.DataFrame:
    """The training log's first batch: its columns and the evidence of its order."""
    head = next(readers.interaction_batches(settings.train_path, settings.format, settings.columns), None)
    if head is None:
        raise InputError("no interactions (the file has no data rows)", path=settings.train_path)
    return head


def _check_split(settings: Settings, parts: dict, items: int) -> None:
    """Degenerate data, told as what to change, before any example is written."""
    path = settings.train_path
    if not parts.get("train"):
        raise InputError(f"the {settings.split} split leaves no training interactions; give a longer log or another "
                         "data.split", path=path, field="data.split")
    if not parts.get("test"):
        raise InputError(f"the {settings.split} split leaves no test interactions (every user has too few "
                         "interactions to hold one out); give users with at least two interactions, or another "
                         "data.split", path=settings.source_of("test"), field="data.split")
    if items < 2:
        raise InputError(f"{items} item(s) in the training vocabulary (after data.min_item_count="
                         f"{settings.min_item_count}): retrieval ranks at least two items; give a log with more items "
                         "or lower data.min_item_count", path=path, field="data.min_item_count")


def run(settings: Settings, engine: Engine, order_request: str,
        warm_start: Optional[artifacts.RunPaths] = None) -> Prepared:
    """Runs the stage (see the module docstring) on ``engine``, ``order_request`` being ``data.order``; writes the
    run's vocabularies (ordered stably against ``warm_start``'s, the published run, when given),
    ``data/train|test(|validation).parquet`` and ``data/examples/``."""
    paths = settings.paths
    paths.train_data.parent.mkdir(parents=True, exist_ok=True)
    paths.item_vocab.parent.mkdir(parents=True, exist_ok=True)
    _clean(settings)
    head = _head(settings)
    fmt = readers.guess_format(settings.train_path) if settings.format == "auto" else settings.format
    decision = order_lib.resolve(order_request, head, fmt, settings.train_path)
    if decision.is_set and settings.split in TIME_SPLITS:
        raise InputError(f"data.split={settings.split} needs time order, but the data are sets ({decision.evidence});"
                         " use data.split=random or files, or set data.order=time", path=settings.train_path,
                         field="data.split")
    kind = NO_EXAMPLES if settings.examples == NO_EXAMPLES else (SET if decision.is_set else NEXT_ITEM)
    settings = dataclasses.replace(settings, order=decision.order, examples=kind, has_time="timestamp" in head)
    read = engine.map(lambda job: partition(settings, job[0], *job[1]), list(enumerate(settings.sources)))
    logging.info("partitioned %d interactions into %d partition(s)", sum(r["rows"] for r in read), settings.num_shards)
    cutoff = None
    if settings.split == "temporal":
        if not settings.has_time:
            raise InputError("a temporal split needs a timestamp column", path=settings.train_path,
                             column=settings.columns.timestamp or "timestamp", field="data.split")
        times = pd.concat([r["times"] for r in read if r["part"] == "train"]).groupby(level=0).sum().sort_index()
        cutoff = splits.cutoff_of(times.index.to_numpy(), times.to_numpy(), 1.0 - settings.temporal_quantile)
        logging.info("temporal cut-off at %d", cutoff)
    threshold = _tuning_threshold(settings, read)
    stats = engine.map(lambda shard: split_shard(settings, shard, cutoff, threshold), list(range(settings.num_shards)))
    item_counts = pd.concat([s["items"] for s in stats]).groupby(level=0).sum()
    item_vocab = Vocabulary.from_counts(item_counts, settings.min_item_count)
    user_vocab = Vocabulary.from_counts(pd.concat([s["users"] for s in stats]), 1)
    _check_split(settings, {name: sum(s["rows"].get(name, 0) for s in stats) for name in PARTS},
                 item_vocab.size - NUM_RESERVED)
    item_vocab, catalogue = _catalogue(settings, item_vocab, item_counts)
    if warm_start is not None:
        item_vocab = item_vocab.stable_against(Vocabulary.load(warm_start.model_item_vocab))
        user_vocab = user_vocab.stable_against(Vocabulary.load(warm_start.user_vocab))
    item_vocab.save(paths.item_vocab)
    user_vocab.save(paths.user_vocab)
    span = (min(s["time"][0] for s in stats), max(s["time"][1] for s in stats))
    tuning = settings.tuning_fraction > 0
    shutil.rmtree(examples_dir(paths, tuning=True).parent, ignore_errors=True)
    for directory in (settings.examples_dir, *([examples_dir(paths, tuning=True)] if tuning else [])):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    built = engine.map(lambda shard: example_shard(settings, shard, span), list(range(settings.num_shards)))
    num_examples = sum(b["examples"] for b in built)
    _write_examples_manifest(settings, settings.examples_dir, num_examples)
    counts = {name: _append(settings, name, getattr(paths, f"{name}_data")) for name in PARTS}
    if tuning:
        _write_examples_manifest(settings, examples_dir(paths, tuning=True), sum(b["tuning_examples"] for b in built))
        counts.update({name: _append(settings, name, tuning_data(paths, name.split("_")[1])) for name in TUNING_PARTS})
    _clean(settings)
    if not counts["test"]:
        raise InputError("no test interaction has a user and an item known to training (data.unknown_policy="
                         f"{settings.unknown_policy} dropped them all)", path=settings.source_of("test"),
                         field="data.unknown_policy")
    dropped = {name: sum(b["dropped"].get(name, 0) for b in built) for name in PARTS[1:]}
    logging.info("prepared %d train, %d test interactions; %d %s examples in %d shard(s)", counts["train"],
                 counts["test"], num_examples, kind, settings.num_shards)
    holdout = None
    if tuning:
        holdout = {"fraction": settings.tuning_fraction, "validation_interactions": counts["tuning_validation"] or 0,
                   "sampled_users": threshold is not None,
                   "train_interactions": counts["tuning_train"] or 0,
                   "examples": sum(b["tuning_examples"] for b in built)}
        logging.info("automatic validation holdout (train.validation_fraction=%g): %d of the %d training interactions",
                     settings.tuning_fraction, holdout["validation_interactions"], counts["train"])
    return Prepared(counts["train"], counts["test"], counts["validation"] or 0, user_vocab.size - NUM_RESERVED,
                    item_vocab.size - NUM_RESERVED, {k: v for k, v in dropped.items() if v}, decision.as_dict(),
                    {"kind": kind, "count": num_examples, "shards": settings.num_shards,
                     "streamed": settings.num_shards > 1}, holdout, catalogue)


def _catalogue(settings: Settings, item_vocab: Vocabulary, item_counts: pd.Series) -> tuple[Vocabulary, dict]:
    """The item vocabulary of the catalogue (``retrieval.data.catalogue``) and its counts; saves the item feature
    specs (``vocab/item_features.json``) that training and a catalogue refresh code the table with. ``item_counts``:
    the training counts before ``data.min_item_count``, so a listed item below it keeps its clicks and stays warm
    (``Vocabulary.with_catalogue``): only items nobody clicked are cold."""
    source, cells = "interactions", {}
    if settings.item_features_path:
        table, specs = catalogue_lib.read_specs(settings.item_features_path, settings.columns.item,
                                                settings.item_features, "data.item_features")
        features_lib.save_specs(settings.paths.item_features, settings.columns.item, specs)
        cells = features_lib.cell_counts(table, specs)
        if settings.catalogue_from_table:
            item_vocab = item_vocab.with_catalogue(table[settings.columns.item], item_counts)
            source = "item_features"
    warm = int(item_vocab.warm.sum())
    counts = {"items": item_vocab.size - NUM_RESERVED, "warm": warm, "cold": item_vocab.size - NUM_RESERVED - warm,
              "source": source, "cold_item_fraction": settings.cold_item_fraction,
              **{f"{what}_cells": by_column for what, by_column in cells.items()}}
    logging.info("catalogue (%s): %d items, %d warm (with training interactions), %d cold", source, counts["items"],
                 warm, counts["cold"])
    if any(cells.values()):
        logging.info("item table cells: missing (empty or null) %s, with a NUL byte %s", cells["missing"], cells["nul"])
    return item_vocab, counts


def _write_examples_manifest(settings: Settings, directory: Path, num_examples: int) -> None:
    names, streamed = range(settings.num_shards), settings.num_shards > 1
    if settings.examples == SET:
        set_examples.write_manifest(directory, [set_shard_file("", k).name for k in names], num_examples, streamed)
    elif settings.examples == NEXT_ITEM:
        shards.write_manifest(directory, [shards.shard_file("", k).name for k in names], num_examples,
                              settings.max_history, settings.example_age and settings.has_time, streamed)


# ------------------------------------------------------------------ what training reads
def load_examples(paths: artifacts.RunPaths, in_memory: bool, max_history: int, history_keep: float = 1.0,
                  shuffle_buffer: int = 65_536, tuning: bool = False) -> examples_lib.ExampleSource:
    """The run's training examples (``tuning``: those of the training data minus the automatic holdout): set pairs or
    next-item examples, held in memory (``in_memory``) or streamed from the shard files; either way an
    :class:`examples.ExampleSource`."""
    directory = examples_dir(paths, tuning)
    kind = artifacts.read_json(directory / examples_lib.MANIFEST).get("kind", NEXT_ITEM)
    if kind == SET:
        source = set_examples.SetShards.load(directory, max_history, history_keep)
    else:
        source = shards.ExampleShards.load(directory, shuffle_buffer)
    return source.in_memory() if in_memory else source


def training_indices(paths: artifacts.RunPaths, item_vocab: Vocabulary,
                     user_vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """(user indices, item indices, timestamps or None) of the run's training table, read in record batches: memory
    holds the integer arrays, never the table's strings (Item2Vec's input)."""
    table = pq.ParquetFile(paths.train_data)
    has_time = "timestamp" in table.schema_arrow.names
    users, items, timestamps = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]
    for batch in table.iter_batches():
        users.append(user_vocab.lookup(batch.column("user_id").to_numpy(zero_copy_only=False)).astype(np.int32))
        items.append(item_vocab.lookup(batch.column("item_id").to_numpy(zero_copy_only=False)).astype(np.int32))
        if has_time:
            timestamps.append(batch.column("timestamp").to_numpy())
    return np.concatenate(users), np.concatenate(items), np.concatenate(timestamps) if has_time else None
