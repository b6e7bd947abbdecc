"""The prepare stage for logs larger than memory: scan, partition by user, split and build examples shard by shard.

Peak memory depends on the size of one shard (``data.num_shards``), not on the size of the log:

1. **partition** (one task per input piece: a Parquet row-group range, or a whole CSV/TSV file): the log is scanned
   with ``pyarrow.dataset`` in record batches, each batch validated (``readers``' canonical columns) and written by
   ``pyarrow.dataset.write_dataset`` into ``shard=<hash(user_id) mod num_shards>`` partitions, with the row's
   position in the file so that ties in time keep file order. Every user's interactions land in one shard.
2. **split** (one task per shard): the shard is sorted by (user, timestamp, file position) and split per user
   (``leave_last_n`` or ``random``, the in-memory functions of :mod:`splits`; the random holdout draws with seed
   ``seed + shard``); returns the training counts of users and items and the time span.
3. **vocabularies** (here): counts summed over the shards -> ``Vocabulary.from_counts`` (as the in-memory path).
4. **examples** (one task per shard): held-out rows aligned to the vocabulary (``data.unknown_policy``; an item is
   known when it is in the item vocabulary, i.e. after ``min_item_count``), next-item examples of the shard written as
   a TFRecord shard (:mod:`shards`; ``example_age`` over the global time span). Set data (``order=none``, each shard
   shuffled within users with seed ``seed + shard``) writes the shard's training pairs instead
   (``set_examples.write_set_shard``): training draws their histories per shard, every epoch (``SetShards``).
5. **combine** (here): the shards' parts are appended, one shard at a time, to ``train.parquet``, ``test.parquet``,
   ``validation.parquet`` (the files every later stage reads); the partitions are removed.

Tasks run on an engine (:mod:`engine`): in this process by default, or on a Dask cluster; both give the same files
up to the order of the shards' rows. Not streamed (yet): the ``temporal`` and ``files`` splits.
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
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from absl import logging

from retrieval import artifacts
from retrieval.data import bounds, readers, set_examples, shards, splits, validate
from retrieval.data import examples as examples_lib
from retrieval.data import order as order_lib
from retrieval.data.engine import Engine
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError

MODES = ("auto", "on", "off")
SPLITS = ("leave_last_n", "random")
PIECE_ROWS = 4_000_000  # rows of Parquet row groups per partition task
BATCH_ROWS = 1 << 18  # rows per scanned record batch
PARTS = ("train", "test", "validation")


def enabled(data: ml_collections.ConfigDict) -> bool:
    """``data.streaming``: ``on``, ``off``, or ``auto`` (on when the log is at least ``data.streaming_min_mb``)."""
    if data.streaming != "auto":
        return data.streaming == "on"
    path = Path(data.train_path)
    return data.split != "files" and path.is_file() and path.stat().st_size >= data.streaming_min_mb * (1 << 20)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a task needs (picklable: tasks may run in other processes)."""

    path: str
    format: str
    columns: readers.ColumnNames
    run_dir: str  # artifacts.RunPaths root: vocabularies and data/ go there
    num_shards: int
    split: str
    holdout_n: int
    validation: bool
    holdout_fraction: float
    unknown_policy: str
    min_item_count: int
    seed: int
    max_history: int = 50
    example_age: bool = False
    max_examples_per_user: Optional[int] = None
    order: str = "time"

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, run_dir: str | Path) -> Settings:
        d = config.data
        if d.split not in SPLITS:
            raise InputError(f"data.streaming supports the splits {SPLITS}, not {d.split!r}", field="data.split")
        fmt = readers.guess_format(d.train_path) if d.format == "auto" else d.format
        if fmt not in ("csv", "tsv", "parquet"):
            raise InputError(f"data.streaming reads csv, tsv or parquet logs, not {fmt!r}", path=d.train_path,
                             field="data.format")
        bounds.regular_file(str(d.train_path))
        columns = readers.ColumnNames(user=d.user_column, item=d.item_column, timestamp=d.timestamp_column or None)
        model = config.get("model")
        return cls(str(d.train_path), fmt, columns, str(run_dir), int(d.num_shards), d.split, int(d.holdout_n),
                   bool(d.validation), float(d.holdout_fraction), d.unknown_policy, int(d.min_item_count),
                   int(config.seed), int(model.max_history) if model else 50,
                   bool(model and model.get("user_tower") and model.user_tower.use_example_age),
                   d.get("max_examples_per_user", 0) or None)

    @property
    def paths(self) -> artifacts.RunPaths:
        return artifacts.RunPaths(self.run_dir)

    @property
    def partitions(self) -> Path:
        return self.paths.train_data.parent / "partitions"

    @property
    def examples(self) -> Path:
        return examples_dir(self.paths)

    def part(self, name: str, shard: int) -> Path:
        return self.paths.train_data.parent / "parts" / f"{name}-{shard:05d}.parquet"


def examples_dir(paths: artifacts.RunPaths) -> Path:
    """Where a streamed run's example shards live (next-item TFRecords, or set pairs)."""
    return paths.train_data.parent / "examples"


def set_shard_file(directory: str | Path, shard: int) -> Path:
    return Path(directory) / f"set-{shard:05d}.bin"


# ------------------------------------------------------------------ 1. partition
def _source(settings: Settings) -> ds.Dataset:
    with validate.reading(settings.path):
        if settings.format == "parquet":
            return ds.dataset(settings.path, format="parquet")
        text = {settings.columns.user: pa.string(), settings.columns.item: pa.string()}
        return ds.dataset(settings.path, format=ds.CsvFileFormat(
            parse_options=pa_csv.ParseOptions(delimiter="\t" if settings.format == "tsv" else ","),
            convert_options=pa_csv.ConvertOptions(column_types=text)))


def pieces(settings: Settings) -> list[tuple[list[int], int]]:
    """Partition tasks: ``(row groups, first row)`` ranges of about :data:`PIECE_ROWS` rows of a Parquet log, or
    ``([], 0)`` (the whole file) for text."""
    if settings.format != "parquet":
        return [([], 0)]
    metadata = pq.ParquetFile(settings.path).metadata
    out, groups, first, rows = [], [], 0, 0
    for group in range(metadata.num_row_groups):
        groups.append(group)
        rows += metadata.row_group(group).num_rows
        if rows - first >= PIECE_ROWS or group == metadata.num_row_groups - 1:
            out.append((groups, first))
            groups, first = [], rows
    return out


def _batches(settings: Settings, piece: tuple[list[int], int]) -> Iterator[pd.DataFrame]:
    """The piece's rows in record batches, as canonical frames with the file position ``row``."""
    groups, row = piece
    source = _source(settings)
    c = settings.columns
    wanted = [name for name in (c.user, c.item, c.timestamp) if name and name in source.schema.names]
    validate.require_columns(source.schema.names, [c.user, c.item], settings.path)
    if groups:
        fragment = next(iter(source.get_fragments()))
        source = ds.FileSystemDataset([fragment.subset(row_group_ids=groups)], source.schema, source.format,
                                      source.filesystem)
    for batch in source.to_batches(columns=wanted, batch_size=BATCH_ROWS):
        frame = batch.to_pandas()
        if c.user in frame and frame[c.user].dtype.kind in "iu":
            frame[c.user] = frame[c.user].astype(str)
        if c.item in frame and frame[c.item].dtype.kind in "iu":
            frame[c.item] = frame[c.item].astype(str)
        try:
            canonical = readers._canonical(frame, c, settings.path)
        except InputError as e:
            raise InputError(e.message, path=settings.path, column=e.column,
                             row=None if e.row is None else e.row + row) from None
        canonical["row"] = np.arange(row, row + len(frame), dtype=np.int64)
        row += len(frame)
        yield canonical


def shard_of(user_ids: pd.Series, num_shards: int) -> np.ndarray:
    """Shard of each user id: a hash of the string that is the same in every process and on every machine."""
    return (pd.util.hash_array(user_ids.to_numpy(dtype=object)) % np.uint64(num_shards)).astype(np.int32)


def partition(settings: Settings, piece_number: int, piece: tuple[list[int], int]) -> int:
    """Task 1: writes the piece's rows into the shard partitions; returns the number of rows."""
    count = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal count
        for frame in _batches(settings, piece):
            frame["shard"] = shard_of(frame["user_id"], settings.num_shards)
            count += len(frame)
            yield from pa.Table.from_pandas(frame, preserve_index=False).to_batches()

    stream = batches()
    first = next(stream, None)
    if first is None:
        return 0
    reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], stream))
    ds.write_dataset(reader, settings.partitions, format="parquet",
                     partitioning=ds.partitioning(pa.schema([("shard", pa.int32())]), flavor="hive"),
                     basename_template=f"piece-{piece_number:05d}-{{i}}.parquet",
                     existing_data_behavior="overwrite_or_ignore")
    return count


# ------------------------------------------------------------------ 2. split
def _read_shard(settings: Settings, shard: int) -> pd.DataFrame:
    directory = settings.partitions / f"shard={shard}"
    if not directory.exists():
        return pd.DataFrame({"user_id": pd.Series([], dtype=str), "item_id": pd.Series([], dtype=str),
                             "row": np.zeros(0, np.int64)})
    frame = ds.dataset(directory, format="parquet").to_table().to_pandas()
    keys = ["user_id"] + (["timestamp"] if "timestamp" in frame else []) + ["row"]
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def split_shard(settings: Settings, shard: int) -> dict:
    """Task 2: splits the shard's users, writes the parts; returns training counts and the time span."""
    frame = _read_shard(settings, shard)
    if settings.order == "none":
        frame = order_lib.shuffle_within_users(frame, settings.seed + shard)
    if frame.empty:
        split = splits.Split(frame, frame, frame if settings.validation else None)
    elif settings.split == "leave_last_n":
        split = splits.leave_last_n_out(frame, settings.holdout_n,
                                        validation_n=settings.holdout_n if settings.validation else 0, policy="keep")
    else:
        split = splits.random_holdout(frame, settings.holdout_fraction, seed=settings.seed + shard, policy="keep")
    for name in PARTS:
        part = getattr(split, name)
        if part is not None:
            _write(part, settings.part(name, shard))
    train = split.train
    times = train["timestamp"].to_numpy() if "timestamp" in train else np.zeros(0, np.int64)
    return {"items": train["item_id"].value_counts(sort=False), "users": train["user_id"].value_counts(sort=False),
            "time": (int(times.min(initial=np.iinfo(np.int64).max)), int(times.max(initial=np.iinfo(np.int64).min)))}


def _write(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.drop(columns=["row", "shard"], errors="ignore").reset_index(drop=True).to_parquet(path, index=False)


# ------------------------------------------------------------------ 4. examples
def _user_indices(user_vocab_path: Path, users: pd.Series) -> np.ndarray:
    """Vocabulary indices of ``users``, reading only their rows of the saved user vocabulary (bounded memory)."""
    wanted = pa.array(pd.unique(users.to_numpy(dtype=object)), pa.string())
    table = ds.dataset(user_vocab_path, format="parquet").to_table(columns=["index", "id"],
                                                                   filter=ds.field("id").isin(wanted))
    found = pd.Index(table.column("id").to_numpy(zero_copy_only=False)).get_indexer(users.to_numpy(dtype=object))
    return table.column("index").to_numpy()[found]


def example_shard(settings: Settings, shard: int, time_span: tuple[int, int]) -> dict:
    """Task 4: aligns the held-out parts to the vocabulary and writes the shard's next-item examples."""
    item_vocab = Vocabulary.load(settings.paths.item_vocab)
    train = pd.read_parquet(settings.part("train", shard))
    known = pd.DataFrame({"user_id": train["user_id"].drop_duplicates().reset_index(drop=True),
                          "item_id": pd.Series(item_vocab.ids[NUM_RESERVED:])})
    dropped = {}
    for name in PARTS[1:]:
        path = settings.part(name, shard)
        if path.exists():
            aligned, dropped[name] = splits.align_to_train(pd.read_parquet(path), known, settings.unknown_policy,
                                                           path=settings.path, name=name)
            _write(aligned, path)
    out = {"dropped": dropped, "examples": 0}
    users = _user_indices(settings.paths.user_vocab, train["user_id"])
    items = item_vocab.lookup(train["item_id"].to_numpy())
    if settings.order == "none":
        out["examples"] = set_examples.write_set_shard(users, items, set_shard_file(settings.examples, shard))
        return out
    timestamps = train["timestamp"].to_numpy() if "timestamp" in train else None
    built = examples_lib.next_item_examples(
        users, items, timestamps, max_history=settings.max_history,
        example_age=settings.example_age and timestamps is not None,
        max_examples_per_user=settings.max_examples_per_user, seed=settings.seed + shard)
    if "example_age" in built and len(timestamps):  # rescale the shard's span to the log's (the in-memory one)
        low, high = float(timestamps.min()), float(timestamps.max())
        age_seconds = built["example_age"].astype(np.float64) * max(high - low, 1.0) + (time_span[1] - high)
        built["example_age"] = (age_seconds / max(time_span[1] - time_span[0], 1.0)).astype(np.float32)
    out["examples"] = shards.write_shard(built, shards.shard_file(settings.examples, shard), settings.seed + shard)
    return out


# ------------------------------------------------------------------ driver
def _clean(settings: Settings) -> None:
    """Removes the intermediate partitions and parts (a rerun of the stage starts from the log)."""
    shutil.rmtree(settings.partitions, ignore_errors=True)
    shutil.rmtree(settings.part("train", 0).parent, ignore_errors=True)


def _append(settings: Settings, name: str, target: Path) -> int:
    """Appends the shards' ``name`` parts to the Parquet file ``target``, one shard in memory at a time."""
    paths = [settings.part(name, shard) for shard in range(settings.num_shards)]
    paths = [path for path in paths if path.exists()]
    if not paths:
        return 0
    schema = pq.read_schema(paths[0])
    rows = 0
    with pq.ParquetWriter(target, schema) as writer:
        for path in paths:
            table = pq.read_table(path).cast(schema)
            writer.write_table(table)
            rows += table.num_rows
    return rows


def prepare(settings: Settings, engine: Engine, order_request: str,
            warm_start: Optional[artifacts.RunPaths] = None) -> dict:
    """Runs the stage (see the module docstring) on ``engine``, ``order_request`` being ``data.order``; writes the
    run's vocabularies (ordered stably against ``warm_start``'s, the published run, when given),
    ``data/train|test(|validation).parquet`` and ``data/examples/``; returns the stage summary (counts, order
    decision, shards)."""
    paths = settings.paths
    paths.train_data.parent.mkdir(parents=True, exist_ok=True)
    paths.item_vocab.parent.mkdir(parents=True, exist_ok=True)
    _clean(settings)
    head = next(_batches(settings, pieces(settings)[0]), None)
    if head is None:
        raise InputError("no interactions", path=settings.path)
    decision = order_lib.resolve(order_request, head, settings.format, settings.path)
    if decision.order == "none" and settings.split != "random":
        raise InputError(f"data.split={settings.split} needs time order, but the data are sets ({decision.evidence})",
                         path=settings.path, field="data.split")
    settings = dataclasses.replace(settings, order=decision.order)
    rows = engine.map(lambda job: partition(settings, *job), list(enumerate(pieces(settings))))
    logging.info("partitioned %d interactions into %d shards", sum(rows), settings.num_shards)
    stats = engine.map(lambda shard: split_shard(settings, shard), list(range(settings.num_shards)))
    item_vocab = Vocabulary.from_counts(pd.concat([s["items"] for s in stats]).groupby(level=0).sum(),
                                        settings.min_item_count)
    user_vocab = Vocabulary.from_counts(pd.concat([s["users"] for s in stats]), 1)
    if warm_start is not None:
        item_vocab = item_vocab.stable_against(Vocabulary.load(warm_start.item_vocab))
        user_vocab = user_vocab.stable_against(Vocabulary.load(warm_start.user_vocab))
    item_vocab.save(paths.item_vocab)
    user_vocab.save(paths.user_vocab)
    span = (min(s["time"][0] for s in stats), max(s["time"][1] for s in stats))
    shutil.rmtree(settings.examples, ignore_errors=True)
    settings.examples.mkdir(parents=True)
    built = engine.map(lambda shard: example_shard(settings, shard, span), list(range(settings.num_shards)))
    num_examples = sum(b["examples"] for b in built)
    if decision.order == "none":
        set_examples.write_manifest(settings.examples, [set_shard_file("", k).name for k in range(settings.num_shards)],
                                    num_examples)
    else:
        shards.write_manifest(settings.examples, [shards.shard_file("", k).name for k in range(settings.num_shards)],
                              num_examples, settings.max_history, settings.example_age and "timestamp" in head)
    counts = {name: _append(settings, name, getattr(paths, f"{name}_data")) for name in PARTS}
    _clean(settings)
    dropped = {name: sum(b["dropped"].get(name, 0) for b in built) for name in PARTS[1:]}
    logging.info("streamed prepare: %d train, %d test interactions; %d next-item examples in %d shards",
                 counts["train"], counts["test"], num_examples, settings.num_shards)
    return {"train_interactions": counts["train"], "test_interactions": counts["test"],
            "validation_interactions": counts["validation"], "users": user_vocab.size - 2,
            "items": item_vocab.size - 2, "dropped": {k: v for k, v in dropped.items() if v},
            "order": decision.as_dict(),
            "streaming": {"shards": settings.num_shards, "examples": num_examples, "pieces": len(rows)}}
