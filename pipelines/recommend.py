"""Batch inference: the top-k items for every user of a run (or for a given list of users), as Parquet.

    python -m pipelines.recommend --run_dir=artifacts/two_tower --k=100 --output=recs.parquet [--users=ids.txt]
    python -m pipelines.recommend --run_dir=artifacts/two_tower --lineage=lastfm ...   # a lineage's published run
    python -m pipelines.recommend --run_dir=... --output=recs/ --sharded   # recs/part-00000.parquet, ... per chunk

Output columns: ``user_id`` (string), ``item_ids`` (list<string>, original ids, best first), ``scores``
(list<float32>). Training items are excluded by default. A user absent from the training data gets the server's
answer to an unknown user: the most popular training items (``retrieval.serving.generator.most_popular``), with
``scores`` null, since no model scored them (it got the user tower's empty-history answer, unlike HTTP and
``CandidateGenerator``). Exit codes: see ``retrieval.cli``.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from absl import flags, logging

from retrieval import artifacts, cli
from retrieval.errors import InputError
from retrieval.jobs import locations

_RUN = cli.RunDirFlags("recommend from (its exported model and training data: histories, items to exclude)")
_K = flags.DEFINE_integer("k", 100, "Number of items per user.")
_OUTPUT = flags.DEFINE_string("output", None, "Parquet file to write (atomically), or with --sharded a directory.")
_SHARDED = flags.DEFINE_bool("sharded", False, "Write --output as a directory of Parquet files, one per chunk of "
                             "--chunk_users users (part-00000.parquet, ...), replaced atomically, instead of one file.")
_USERS = flags.DEFINE_string("users", None, "Optional user list: a csv/tsv/parquet file with a user_id column or a "
                             "text file with one id per line. Default: every user of the training data.")
_CHUNK_USERS = flags.DEFINE_integer("chunk_users", 65_536, "Users encoded, ranked and written (one Parquet row "
                                    "group) at a time: memory for results follows this, not the number of users.")
_INCLUDE_TRAIN = flags.DEFINE_bool("include_train", False, "Allow recommending items the user already has in the "
                                   "training data (excluded by default).")


def _popular_for_unknown_users(tables: Iterable[pa.Table], run_dir: str, k: int) -> Iterator[pa.Table]:
    """``tables`` with each user absent from the run's training data answered by the ``k`` most popular training
    items and null scores (module docstring). One pass over ``data/train.parquet`` counts the items and collects
    the users, a record batch at a time."""
    from retrieval.serving.generator import most_popular

    paths = artifacts.RunPaths(run_dir)
    users, counts = [], []
    for batch in pq.ParquetFile(paths.train_data).iter_batches(columns=["user_id", "item_id"]):
        frame = batch.to_pandas()
        users.append(frame["user_id"].astype(str).unique())
        counts.append(frame["item_id"].astype(str).value_counts())
    known = pd.Index(np.concatenate(users or [np.zeros(0, object)])).unique()
    catalogue = pq.read_table(paths.item_embeddings, columns=["item_id"]).column("item_id").to_numpy(
        zero_copy_only=False).astype(str)
    trained = pd.concat(counts).groupby(level=0).sum() if counts else pd.Series(dtype=np.int64)
    popular = catalogue[most_popular(trained.reindex(catalogue).fillna(0).to_numpy())[:k]].tolist()
    answered = 0
    for table in tables:
        unknown = np.flatnonzero(~pd.Index(table.column("user_id").to_numpy(zero_copy_only=False)).isin(known))
        if len(unknown):
            items, scores = table.column("item_ids").to_pylist(), table.column("scores").to_pylist()
            for row in unknown:
                items[row], scores[row] = popular, None
            table = table.set_column(1, "item_ids", pa.array(items, table.schema.field("item_ids").type))
            table = table.set_column(2, "scores", pa.array(scores, table.schema.field("scores").type))
            answered += len(unknown)
        yield table
    logging.info("%d users absent from the training data got the %d most popular items (scores null)", answered, k)


def main(argv: Sequence[str]) -> None:
    cli.check_arguments(argv, _RUN.run_dir, _OUTPUT)
    if _K.value < 1:
        raise InputError(f"--k must be at least 1, got {_K.value}", field="k")
    if _CHUNK_USERS.value < 1:
        raise InputError(f"--chunk_users must be at least 1, got {_CHUNK_USERS.value}", field="chunk_users")
    run_dir = str(_RUN.resolve())
    if _USERS.value:
        locations.check_input(_USERS.value, "users")
    if _SHARDED.value:
        locations.check_writable_dir(_OUTPUT.value, "output")
    else:
        locations.check_output_file(_OUTPUT.value, "output")
    from retrieval.evaluation import inference  # TensorFlow loads only now: --help and flag errors stay instant

    users = inference.read_user_list(_USERS.value) if _USERS.value else None
    tables = _popular_for_unknown_users(inference.recommend_chunks(
        run_dir, k=_K.value, user_ids=users, exclude_train=not _INCLUDE_TRAIN.value, chunk_users=_CHUNK_USERS.value),
        run_dir, _K.value)
    written = inference.write_recommendations(tables, _OUTPUT.value, sharded=_SHARDED.value)
    print(f"wrote top-{_K.value} items for {written} users to {_OUTPUT.value}")


if __name__ == "__main__":
    cli.run(main)
