"""Batch inference: the top-k items for every user of a run (or for a given list of users), as Parquet.

    python -m pipelines.recommend --run_dir=artifacts/two_tower --k=100 --output=recs.parquet [--users=ids.txt]
    python -m pipelines.recommend --run_dir=artifacts/two_tower --lineage=lastfm ...   # a lineage's published run
    python -m pipelines.recommend --run_dir=... --output=recs/ --sharded   # recs/part-00000.parquet, ... per chunk

Output columns: ``user_id`` (string), ``item_ids`` (list<string>, original ids, best first), ``scores``
(list<float32>) and ``fallback`` (bool). Training items are excluded by default. A user absent from the training
data gets the server's answer to an unknown user: the most popular training items
(``retrieval.serving.generator.most_popular``), with ``fallback`` true and ``scores`` null, since no model scored
them (``retrieval.evaluation.inference``), as over HTTP and from ``CandidateGenerator``. Exit codes: see
``retrieval.cli``.
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from retrieval import cli, locations
from retrieval.errors import InputError

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
    tables = inference.recommend_chunks(run_dir, k=_K.value, user_ids=users, exclude_train=not _INCLUDE_TRAIN.value,
                                        chunk_users=_CHUNK_USERS.value)
    written = inference.write_recommendations(tables, _OUTPUT.value, sharded=_SHARDED.value)
    print(f"wrote top-{_K.value} items for {written} users to {_OUTPUT.value}")


if __name__ == "__main__":
    cli.run(main)
