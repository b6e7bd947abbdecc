"""Synthetic interaction logs with planted, learnable structure (the bundled default dataset in ``data/``).

Generative story (all draws from one seeded ``numpy`` generator, so a seed fixes the files byte for byte):

1. Items belong to one of ``num_clusters`` latent clusters and have a Zipf popularity ``w_i = 1 / rank_i^s``
   (ranks a random permutation).
2. Each user likes a primary and a secondary cluster (weights ``a`` and ``1 - a``, ``a ~ U(0.6, 0.9)``).
3. A user's sequence follows a sticky Markov chain over those two clusters (stay with probability ``stickiness``),
   so recent items predict the next one. Each step draws, with probability ``affinity``, an item of the active
   cluster in proportion to popularity, else an item from global popularity. Repeats of an item are dropped.
4. Timestamps: a user starts at a uniform time in a 300-day window; gaps are exponential (mean 6 hours).
5. Item genres (multi-valued, ``|``-joined): each cluster has two signature genres; an item has the first with
   probability 0.9, the second 0.5, a random genre 0.3 (at least one). Users have a ``segment`` = primary cluster
   // 2 with probability 0.8, else random: side features carry real but noisy signal.

``python -m retrieval.data.synthetic --output_dir=data --seed=0`` writes ``interactions.csv`` (user_id,item_id,
timestamp), ``items.csv`` (item_id,genres) and ``users.csv`` (user_id,segment), then prints a sanity check: on a
leave-last-one-out split, item co-occurrence kNN must beat most-popular by a wide margin (see :func:`sanity_check`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from absl import app, flags, logging
from scipy import sparse

from retrieval.artifacts import atomic_path

START_TIME = 1_600_000_000


def _zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    return 1.0 / (rng.permutation(n) + 1.0) ** exponent


def _sample_in_clusters(clusters: np.ndarray, weights: np.ndarray, wanted: np.ndarray,
                        rng: np.random.Generator) -> np.ndarray:
    """One item per entry of ``wanted`` (a cluster), drawn in proportion to ``weights`` within that cluster.

    Items sorted by cluster get a cumulative weight that runs from c to c + 1 inside cluster c, so a uniform draw
    in [c, c + 1) lands, by ``searchsorted``, on an item of cluster c.
    """
    order = np.lexsort((np.arange(len(clusters)), clusters))
    sorted_clusters, sorted_weights = clusters[order], weights[order]
    totals = np.bincount(sorted_clusters, weights=sorted_weights)
    within = np.cumsum(sorted_weights) - np.repeat(np.cumsum(totals) - totals, np.bincount(sorted_clusters))
    edges = sorted_clusters + within / totals[sorted_clusters]
    picks = np.searchsorted(edges, wanted + rng.random(len(wanted)) * (1 - 1e-12), side="right")
    return order[np.minimum(picks, len(order) - 1)]


def _users_block(rng: np.random.Generator, num_users: int, first_user: int, item_cluster: np.ndarray,
                 popularity: np.ndarray, interactions_per_user: float, num_clusters: int, affinity: float,
                 stickiness: float) -> tuple[pd.DataFrame, np.ndarray]:
    """Interactions of users ``first_user .. first_user + num_users - 1`` (steps 2-4 of the story) and their primary
    clusters (for :func:`_segments`)."""
    num_items = len(item_cluster)
    primary = rng.integers(num_clusters, size=num_users)
    secondary = (primary + rng.integers(1, num_clusters, size=num_users)) % num_clusters
    primary_weight = rng.uniform(0.6, 0.9, size=num_users)

    wanted = np.minimum(np.maximum(5, rng.geometric(1.0 / interactions_per_user, size=num_users)), num_items // 4)
    lengths = 2 * wanted + 10  # oversampled: repeats are dropped below, then each user is cut to ``wanted``
    user = np.repeat(np.arange(num_users), lengths)
    step = np.arange(len(user)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    # Sticky chain: at a switch (always at step 0) the active cluster is redrawn from the user's mixture; between
    # switches it stays, i.e. each step takes the draw of the latest switch (a running maximum of switch positions).
    switch = (step == 0) | (rng.random(len(user)) > stickiness)
    draw = np.where(rng.random(len(user)) < primary_weight[user], primary[user], secondary[user])
    latest = np.maximum.accumulate(np.where(switch, np.arange(len(user)), 0))
    active = draw[latest]
    from_cluster = _sample_in_clusters(item_cluster, popularity, active, rng)
    from_global = rng.choice(num_items, size=len(user), p=popularity / popularity.sum())
    item = np.where(rng.random(len(user)) < affinity, from_cluster, from_global)

    start = START_TIME + rng.integers(0, 300 * 86_400, size=num_users)
    gaps = rng.exponential(6 * 3600, size=len(user)).astype(np.int64) + 1
    gaps[step == 0] = 0
    time = start[user] + np.cumsum(gaps) - np.repeat(np.cumsum(gaps)[np.cumsum(lengths) - lengths], lengths)
    interactions = pd.DataFrame({"user_id": user, "item_id": item, "timestamp": time.astype(np.int64)})
    interactions = interactions.drop_duplicates(["user_id", "item_id"], keep="first")
    interactions = interactions[interactions.groupby("user_id").cumcount().to_numpy() < wanted[
        interactions["user_id"].to_numpy()]].reset_index(drop=True)
    interactions["user_id"] = "u" + (interactions["user_id"] + first_user).astype(str)
    interactions["item_id"] = "i" + interactions["item_id"].astype(str)
    return interactions, primary


def _items(rng: np.random.Generator, item_cluster: np.ndarray, num_clusters: int, num_genres: int) -> pd.DataFrame:
    """The item table (step 5 of the story): item_id, genres."""
    num_items = len(item_cluster)
    signature = np.stack([rng.permutation(num_genres)[:2] for _ in range(num_clusters)])
    has = np.zeros((num_items, num_genres), bool)
    has[np.arange(num_items), signature[item_cluster, 0]] = rng.random(num_items) < 0.9
    has[np.arange(num_items), signature[item_cluster, 1]] |= rng.random(num_items) < 0.5
    has[np.arange(num_items), rng.integers(num_genres, size=num_items)] |= rng.random(num_items) < 0.3
    has[~has.any(axis=1), signature[item_cluster[~has.any(axis=1)], 0]] = True
    genre_names = np.array([f"g{g}" for g in range(num_genres)], dtype=object)
    return pd.DataFrame({"item_id": [f"i{i}" for i in range(num_items)],
                         "genres": ["|".join(genre_names[row]) for row in has]})


def _segments(rng: np.random.Generator, primary: np.ndarray, first_user: int, num_clusters: int) -> pd.DataFrame:
    """The user table (step 5 of the story): user_id, segment."""
    num_users = len(primary)
    segment = np.where(rng.random(num_users) < 0.8, primary // 2, rng.integers(0, (num_clusters + 1) // 2,
                                                                               size=num_users))
    return pd.DataFrame({"user_id": [f"u{u}" for u in range(first_user, first_user + num_users)],
                         "segment": [f"s{s}" for s in segment]})


def generate(num_users: int = 3000, num_items: int = 2000, interactions_per_user: float = 53.0,
             num_clusters: int = 20, num_genres: int = 18, zipf_exponent: float = 0.8, affinity: float = 0.85,
             stickiness: float = 0.8, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Returns ``(interactions, items, users)`` DataFrames (see the module docstring for the generative story).

    ``interactions``: user_id, item_id (strings ``u<n>``, ``i<n>``), timestamp (int64 seconds), sorted by user then
    time; ``items``: item_id, genres; ``users``: user_id, segment. ``interactions_per_user`` is the mean length
    before repeats are dropped (every user keeps at least 5 draws). Everything is in memory (about 1 KB per
    interaction at the peak); :func:`write_chunked` writes logs of any size in bounded memory.
    """
    rng = np.random.default_rng(seed)
    item_cluster = rng.permutation(np.arange(num_items) % num_clusters)
    popularity = _zipf_weights(num_items, zipf_exponent, rng)
    interactions, primary = _users_block(rng, num_users, 0, item_cluster, popularity, interactions_per_user,
                                         num_clusters, affinity, stickiness)
    items = _items(rng, item_cluster, num_clusters, num_genres)
    return interactions, items, _segments(rng, primary, 0, num_clusters)


def generate_chunks(num_users: int, num_items: int = 2000, chunk_users: int = 20_000,
                    interactions_per_user: float = 53.0, num_clusters: int = 20, num_genres: int = 18,
                    zipf_exponent: float = 0.8, affinity: float = 0.85, stickiness: float = 0.8,
                    seed: int = 0) -> tuple[pd.DataFrame, Iterator[tuple[pd.DataFrame, pd.DataFrame]]]:
    """The same generative story as :func:`generate`, users drawn ``chunk_users`` at a time: returns the item table
    and an iterator of ``(interactions, users)`` per chunk, so memory depends on the chunk, not on ``num_users``.

    The items come from ``default_rng(seed)``; chunk ``c`` draws from its own ``default_rng([seed, c])``, so a chunk
    can be regenerated alone. The draws differ from :func:`generate`'s (one generator for everything), hence
    different files for the same seed; the distribution is the same.
    """
    rng = np.random.default_rng(seed)
    item_cluster = rng.permutation(np.arange(num_items) % num_clusters)
    popularity = _zipf_weights(num_items, zipf_exponent, rng)
    items = _items(rng, item_cluster, num_clusters, num_genres)

    def chunks() -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
        for number, first in enumerate(range(0, num_users, chunk_users)):
            chunk_rng = np.random.default_rng([seed, number])
            size = min(chunk_users, num_users - first)
            interactions, primary = _users_block(chunk_rng, size, first, item_cluster, popularity,
                                                 interactions_per_user, num_clusters, affinity, stickiness)
            yield interactions, _segments(chunk_rng, primary, first, num_clusters)

    return items, chunks()


def sanity_check(interactions: pd.DataFrame, k: int = 10, max_users: int = 5000, seed: int = 0) -> dict[str, float]:
    """Hit rate@k of the last item of each user (leave-last-one-out, seen items excluded, full ranking) for
    most-popular and for item co-occurrence kNN (score = sum of cosine-normalized co-occurrence rows over the
    user's training items). A planted structure shows as a large gap; ``ratio`` is kNN / popularity.

    At most ``max_users`` users (a seeded sample beyond that) and the items they touched take part. Sparse
    throughout: the co-occurrence kNN scores ``S D^-1 S^T S D^-1`` (``S`` users x items, ``D`` the item norms) are
    computed as ``(S D^-1 S^T) (S D^-1)`` in blocks of users, so memory grows with ``max_users`` and the items of the
    sample, never with the catalogue squared. (The diagonal of ``S^T S`` only scores seen items, which are excluded.)
    """
    users = pd.unique(interactions["user_id"])
    if len(users) > max_users:
        users = np.random.default_rng(seed).choice(users, max_users, replace=False)
        interactions = interactions[interactions["user_id"].isin(users)]
    users, user_index = np.unique(interactions["user_id"].to_numpy(dtype=str), return_inverse=True)
    item_ids, item_index = np.unique(interactions["item_id"].to_numpy(dtype=str), return_inverse=True)
    order = np.lexsort((interactions["timestamp"].to_numpy(), user_index))
    last = np.zeros(len(order), bool)
    last[order[np.r_[user_index[order][1:] != user_index[order][:-1], True]]] = True
    seen = sparse.csr_matrix((np.ones(int((~last).sum()), np.float32), (user_index[~last], item_index[~last])),
                             shape=(len(users), len(item_ids)))
    target = np.zeros(len(users), np.int64)
    target[user_index[last]] = item_index[last]
    counts = np.asarray(seen.sum(axis=0)).ravel()
    weighted = seen @ sparse.diags(1.0 / np.sqrt(np.maximum(counts, 1.0)).astype(np.float32))
    user_similarity = (weighted @ seen.T).tocsr()
    hits = {"popularity": 0, "cooccurrence_knn": 0}
    for start in range(0, len(users), 256):
        rows = slice(start, start + 256)
        excluded = seen[rows].toarray() > 0
        for name, score in (("popularity", np.broadcast_to(counts, excluded.shape).copy()),
                            ("cooccurrence_knn", (user_similarity[rows] @ weighted).toarray())):
            score[excluded] = -np.inf
            top = np.argpartition(-score, k, axis=1)[:, :k]
            hits[name] += int((top == target[rows, None]).any(axis=1).sum())
    result = {f"{name}_hr@{k}": count / len(users) for name, count in hits.items()}
    result["ratio"] = result[f"cooccurrence_knn_hr@{k}"] / max(result[f"popularity_hr@{k}"], 1e-12)
    return result


def write(output_dir: str | Path, interactions: pd.DataFrame, items: pd.DataFrame, users: pd.DataFrame) -> None:
    """Writes the three CSV files atomically into ``output_dir``."""
    for name, frame in (("interactions.csv", interactions), ("items.csv", items), ("users.csv", users)):
        with atomic_path(Path(output_dir) / name) as tmp:
            frame.to_csv(tmp, index=False)


def write_chunked(output_dir: str | Path, num_users: int, num_items: int, chunk_users: int = 20_000,
                  format: str = "csv", seed: int = 0, sample_users: int = 5000) -> tuple[int, pd.DataFrame]:
    """Writes :func:`generate_chunks`'s log chunk by chunk (``interactions.csv`` appended, or one row group per chunk
    of ``interactions.parquet``), ``items.csv`` and ``users.csv``, each atomically; memory is bounded by the chunk.

    Returns the number of interactions and the interactions of the first ``sample_users`` users (for
    :func:`sanity_check`).
    """
    items, chunks = generate_chunks(num_users, num_items, chunk_users=chunk_users, seed=seed)
    output_dir = Path(output_dir)
    total, sample, sampled = 0, [], 0
    with atomic_path(output_dir / f"interactions.{format}") as log_tmp, atomic_path(output_dir / "users.csv") as \
            users_tmp:
        writer = None
        for number, (interactions, users) in enumerate(chunks):
            table = pa.Table.from_pandas(interactions, preserve_index=False)
            if writer is None:
                writer = (pq.ParquetWriter(log_tmp, table.schema) if format == "parquet"
                          else pa_csv.CSVWriter(log_tmp, table.schema, write_options=pa_csv.WriteOptions(
                              quoting_style="none")))
            writer.write_table(table)
            users.to_csv(users_tmp, mode="a", header=number == 0, index=False)
            if sampled < sample_users:
                kept = users["user_id"][:sample_users - sampled]
                sample.append(interactions[interactions["user_id"].isin(kept)])
                sampled += len(kept)
            total += len(interactions)
        writer.close()
    with atomic_path(output_dir / "items.csv") as tmp:
        items.to_csv(tmp, index=False)
    return total, pd.concat(sample, ignore_index=True)


def _define_flags() -> None:
    """Flags exist only when run as a program, so importing this module never clashes with a pipeline's flags."""
    flags.DEFINE_string("output_dir", "data", "Directory for interactions.csv, items.csv, users.csv.")
    flags.DEFINE_integer("seed", 0, "Random seed.")
    flags.DEFINE_integer("num_users", 3000, "Number of users.")
    flags.DEFINE_integer("num_items", 2000, "Number of items.")
    flags.DEFINE_integer("chunk_users", 20_000, "Above this many users the log is generated and written in chunks "
                         "of this many users (bounded memory; other draws than the in-memory generation).")
    flags.DEFINE_enum("format", "csv", ["csv", "parquet"], "Format of the interaction log (chunked writes only).")


def main(argv) -> None:
    del argv
    FLAGS = flags.FLAGS
    if FLAGS.num_users <= FLAGS.chunk_users and FLAGS.format == "csv":
        interactions, items, users = generate(num_users=FLAGS.num_users, num_items=FLAGS.num_items, seed=FLAGS.seed)
        write(FLAGS.output_dir, interactions, items, users)
        total, sample = len(interactions), interactions
    else:
        total, sample = write_chunked(FLAGS.output_dir, FLAGS.num_users, FLAGS.num_items, FLAGS.chunk_users,
                                      FLAGS.format, FLAGS.seed)
    logging.info("wrote %d interactions to %s", total, FLAGS.output_dir)
    check = sanity_check(sample)
    print(f"{total} interactions, {FLAGS.num_users} users, {FLAGS.num_items} items; sanity check on "
          f"{sample.user_id.nunique()} users: " + ", ".join(f"{k}={v:.4f}" for k, v in check.items()))


if __name__ == "__main__":
    _define_flags()
    app.run(main)
