"""Batch inference: the top-k items of every user (or of a given list of users) of a run, as Parquet.

The same exact ranking as the evaluation (``ranking.top_k``: blocked matmul, training items excluded by default,
padding/OOV never recommended), fed by the run's exported model (``loading``). A user absent from the training data
gets the answer the server gives an unknown user: the most popular training items (by training interactions, ties in
catalogue order: ``retrieval.serving.generator.most_popular``) with ``fallback`` true and ``scores`` null, since no
model scored them; they are counted in the log. Output columns: ``user_id`` (string), ``item_ids`` (list<string>,
original ids, best first), ``scores`` (list<float32>; null under the fallback) and ``fallback`` (bool); a list is
shorter than k only when fewer than k items can be recommended to that user.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from absl import logging

from retrieval import artifacts
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.evaluation import csr as csr_lib
from retrieval.evaluation import loading, protocols, ranking
from retrieval.serving.generator import most_popular

SCHEMA = pa.schema([("user_id", pa.string()), ("item_ids", pa.list_(pa.string())),
                    ("scores", pa.list_(pa.float32())), ("fallback", pa.bool_())])


def read_user_list(path) -> np.ndarray:
    """User ids from a table with a ``user_id`` column (csv, tsv, parquet) or a text file with one id per line."""
    path = str(path)
    try:
        if path.endswith((".parquet", ".pq")):
            frame = pd.read_parquet(path, columns=["user_id"])
        elif path.endswith((".csv", ".tsv")):
            frame = pd.read_csv(path, sep="\t" if path.endswith(".tsv") else ",", dtype=str)
        else:
            frame = pd.DataFrame({"user_id": pd.read_csv(path, header=None, dtype=str)[0]})
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"cannot read the user list: {e}", path=path) from None
    if "user_id" not in frame:
        raise InputError("the user list needs a user_id column", path=path, column="user_id")
    users = frame["user_id"].dropna().astype(str).str.strip()
    return pd.unique(users[users != ""].to_numpy(dtype=object)).astype(str)


def recommend_chunks(run_dir, k: int = 100, user_ids: Optional[Sequence[str]] = None, exclude_train: bool = True,
                     max_block_bytes: int = 256 << 20, chunk_users: int = 65_536) -> Iterator[pa.Table]:
    """Top-k recommendations of ``user_ids`` (default: every user of the run's user vocabulary, sorted), as one
    Arrow table per ``chunk_users`` users in order. Memory holds the item vectors and one chunk: its users' training
    rows (a filtered scan of ``data/train.parquet``), vectors, exclusions and results."""
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}", field="k")
    paths = artifacts.RunPaths(run_dir)
    model = loading.load_run_model(run_dir)
    users = _training_users(paths) if user_ids is None else np.asarray(user_ids, str)
    logging.info("recommending %d items to %d users, %d users at a time", k, len(users), chunk_users)
    popular = _most_popular(paths, model.item_ids, k)
    cold = 0
    for start in range(0, max(len(users), 1), chunk_users):
        chunk = users[start:start + chunk_users]
        train = loading.read_users_interactions(paths.train_data, chunk, "training data")
        data = protocols.prepare(train, train.iloc[:0], model.item_ids)
        rows = pd.Index(data.user_ids).get_indexer(chunk)
        cold += int((rows < 0).sum())
        # users without training history point at an extra, empty row
        padded = csr_lib.Csr(np.append(data.train.indptr, data.train.indptr[-1]), data.train.indices)
        exclude = csr_lib.take(padded, np.where(rows >= 0, rows, data.train.n_rows)) if exclude_train else None
        vectors = model.user_vectors(chunk, train)
        idx, scores = ranking.top_k(ranking.dot_scorer(vectors, model.item_vectors), len(chunk),
                                    len(model.item_vectors), k, exclude, max_block_bytes=max_block_bytes)
        idx[rows < 0] = np.pad(popular, (0, k - len(popular)), constant_values=-1)
        yield _to_table(chunk, idx, scores, model.item_ids, rows < 0)
    logging.info("%d of %d users had no training history: they got the %d most popular training items (fallback, "
                 "scores null)", cold, len(users), len(popular))


def _most_popular(paths: artifacts.RunPaths, item_ids: np.ndarray, k: int) -> np.ndarray:
    """Item indices (vocabulary rows, as ``ranking.top_k`` gives) of the ``k`` catalogue items with the most
    training interactions, the server's fallback order; one pass over ``data/train.parquet``'s item column, a record
    batch at a time."""
    counts = [pd.Series(dtype=np.int64)]
    for batch in pq.ParquetFile(paths.train_data).iter_batches(columns=["item_id"]):
        counts.append(batch.column(0).to_pandas().astype(str).value_counts())
    trained = pd.concat(counts).groupby(level=0).sum()
    return most_popular(trained.reindex(item_ids).fillna(0).to_numpy())[:k] + NUM_RESERVED


def _training_users(paths: artifacts.RunPaths) -> np.ndarray:
    """Every user of the run's training data, sorted: the user vocabulary's ids, else the training table's."""
    if paths.user_vocab.exists():
        return np.sort(Vocabulary.load(paths.user_vocab).ids[NUM_RESERVED:].astype(str))
    train = loading.read_interactions(paths.train_data, "training data")
    return np.unique(train["user_id"].astype(str).to_numpy())


def recommend(run_dir, k: int = 100, user_ids: Optional[Sequence[str]] = None, exclude_train: bool = True,
              max_block_bytes: int = 256 << 20) -> pa.Table:
    """Top-k recommendations of ``user_ids`` (default: every user of the training data) as one Arrow table."""
    return pa.concat_tables(list(recommend_chunks(run_dir, k, user_ids, exclude_train, max_block_bytes)))


def _to_table(users: np.ndarray, idx: np.ndarray, scores: np.ndarray, item_ids: np.ndarray,
              fallback: np.ndarray) -> pa.Table:
    """One chunk's rows; a ``fallback`` row's scores are null (its items are the popular ones, unscored)."""
    valid = idx >= 0  # -1 slots (nothing left to recommend) come last in each row
    offsets = pa.array(np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int32))
    items = pa.array(item_ids[idx[valid] - NUM_RESERVED], pa.string())
    return pa.table({
        "user_id": pa.array(users, pa.string()),
        "item_ids": pa.ListArray.from_arrays(offsets, items),
        "scores": pa.ListArray.from_arrays(offsets, pa.array(scores[valid], pa.float32()),
                                           mask=pa.array(fallback, pa.bool_())),
        "fallback": pa.array(fallback, pa.bool_()),
    }, schema=SCHEMA)


def write_recommendations(tables: pa.Table | Iterable[pa.Table], path, sharded: bool = False) -> int:
    """Writes a recommendations table, or a stream of them (e.g. from :func:`recommend_chunks`), atomically; returns
    the number of users written. One Parquet file with a row group per table, or with ``sharded`` a directory of
    ``part-00000.parquet``, ``part-00001.parquet``, ... (one file per table: what a distributed reader splits on)."""
    tables = [tables] if isinstance(tables, pa.Table) else tables
    count = 0
    with artifacts.atomic_path(path) as tmp:
        if sharded:
            tmp.mkdir()
            for number, table in enumerate(tables):
                pq.write_table(table, tmp / f"part-{number:05d}.parquet")
                count += table.num_rows
            return count
        with pq.ParquetWriter(tmp, SCHEMA) as writer:
            for table in tables:
                writer.write_table(table)
                count += table.num_rows
    return count
