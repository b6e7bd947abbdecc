"""Item-to-item similarity across warm and cold items: the score-correlation view behind ``/v1/similar``.

With the item tower's cold head (``model.item_tower.cold_head``) an item read by its id is ``[v, 0]`` and one placed
by its features alone (a cold item) ``[0, v, c]``: the user tower scores each block with a head of its own, so the
inner product of a warm and a cold item is exactly 0, and the nearest neighbours of a cold item are cold items only.
Summing the two blocks into one vector does not help either: the heads are trained apart, so the blocks are two
spaces, not one.

What the blocks share is the users. Two items are similar here when the model scores them alike across users: the
similarity is the Pearson correlation, over a sample of training users ``u``, of the scores ``s_i(u) = u . x_i``
and ``s_j(u) = u . x_j``. With ``C`` the covariance of the user vectors, ``Cov(s_i, s_j) = x_i^T C x_j``; with
``C = W W^T`` (``correlation_transform``) the vectors ``x W`` have those covariances as inner products, so their
cosine is the correlation, and an ordinary cosine index over ``x W`` (``build_similar_index``), searched with an
item's own vector mapped the same way (``ItemIndex.transform``), answers it. For a warm-cold pair the correlation
goes through the covariance between the two heads, which is what ties the blocks together; user->item retrieval is
untouched (its index and its one inner product per pair stay as they are).

The folded view: an item read by its id is also given the vector its features alone give it (``[v, v_f, c]``, a cold
item's ``[0, v_f, c]``; ``Folded``, from the run's ``placed_by_features`` column), so its scores over users are those
of the item as known plus as if new, and a new item is compared with a known one through the features both have, not
only through the covariance of the two heads. Measured on MovieLens-100K after a refresh added copies of 14 horror
films under new ids (``configs/catalogue.py`` with titles, genres and years; JOURNAL.md, "Issue 49, item 4: the
folded item-to-item view"): the original is among its copy's 10 neighbours for 11 of 14 copies (3 without the fold),
the copy among the original's for 7 (0), a cold item's neighbours share a genre with it 92% of the time (77%); on the
bundled data's clusters warm items' neighbours stay in their cluster (99.5% against 100%) and cold items' rise from
60% to 64%, 29% of them warm (7%). Runs exported before the column existed keep the unfolded view.

Measured on the bundled data with a seeded 10% of the items cold (``configs/catalogue.py``, genres; the generator's
own item clusters as the truth): among a cold item's 10 neighbours 48% share its cluster with the plain inner
product (none of them warm), 47% with the blocks summed (none warm), 56% with the correlation (15% warm); limited to
warm neighbours, 45% summed against 65% correlated (chance: 5%). Warm items' neighbours: 99.2% -> 99.7%. The
uncentred second moment ``x_i^T E[u u^T] x_j`` without normalisation let a few items into nearly every list.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow.parquet as pq

from retrieval.artifacts import PLACED_BY_FEATURES, PathLike
from retrieval.errors import InputError
from retrieval.index.idmap import IdMap
from retrieval.index.item_index import ItemIndex, build_index
from retrieval.index.source import CHUNK_ROWS, ParquetVectors, VectorSource, shard_files

SCORE_CORRELATION = "score_correlation"  # the run manifest's ``item_similarity`` (``TwoTowerModel.item_similarity``)


def correlation_transform(user_vectors: np.ndarray) -> np.ndarray:
    """``W`` [D, D] with ``W W^T`` the covariance of ``user_vectors`` [m, D] (from its eigendecomposition, rounding
    errors below 0 clipped), so that ``(x_i W) . (x_j W)`` is the covariance over these users of their scores
    ``u . x_i`` and ``u . x_j``."""
    user_vectors = np.asarray(user_vectors, np.float64)
    if user_vectors.ndim != 2 or len(user_vectors) < 2:
        raise InputError(f"the score correlation needs at least two user vectors, got shape {user_vectors.shape}")
    values, vectors = np.linalg.eigh(np.cov(user_vectors, rowvar=False))
    return (vectors * np.sqrt(np.clip(values, 0.0, None))).astype(np.float32)


class Transformed(VectorSource):
    """``source``'s vectors times ``transform`` [D, D'], a chunk at a time."""

    def __init__(self, source: VectorSource, transform: np.ndarray):
        if transform.shape[0] != source.dimension:
            raise InputError(f"a transform of {transform.shape[0]} rows for vectors of dimension {source.dimension}")
        self.source, self.transform = source, transform
        self.count, self.dimension = source.count, int(transform.shape[1])

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        for chunk in self.source.chunks(rows):
            yield chunk @ self.transform


class Folded(VectorSource):
    """Each item's vector read by id plus, for the items read by id (``warm``), the vector its features alone give it
    (module docstring): with the cold head the two fill different blocks, so the sum is their concatenation."""

    def __init__(self, by_id: VectorSource, by_features: VectorSource, warm: np.ndarray):
        if (by_id.count, by_id.dimension) != (by_features.count, by_features.dimension) or len(warm) != by_id.count:
            raise InputError(f"folding {by_id.count} x {by_id.dimension} vectors read by id with "
                             f"{by_features.count} x {by_features.dimension} placed by features and {len(warm)} flags")
        self.by_id, self.by_features, self.warm = by_id, by_features, np.asarray(warm, bool)
        self.count, self.dimension = by_id.count, by_id.dimension

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        start = 0
        for read, placed in zip(self.by_id.chunks(rows), self.by_features.chunks(rows), strict=True):
            yield read + self.warm[start:start + len(read), None] * placed
            start += len(read)


def similarity_vectors(item_embeddings: PathLike) -> VectorSource:
    """The vectors the item-to-item view compares: folded (``Folded``) when the embeddings file has a
    ``placed_by_features`` column, else its ``embedding`` column (runs exported before the fold)."""
    files = shard_files(item_embeddings)
    if not all(PLACED_BY_FEATURES in pq.read_schema(f).names for f in files):
        return ParquetVectors(item_embeddings)
    warm = np.concatenate([pq.read_table(f, columns=["warm"]).column("warm").to_numpy(zero_copy_only=False)
                           for f in files]).astype(bool)
    return Folded(ParquetVectors(item_embeddings), ParquetVectors(item_embeddings, PLACED_BY_FEATURES), warm)


def build_similar_index(vectors: VectorSource, id_map: IdMap, user_vectors: np.ndarray, **options) -> ItemIndex:
    """The item-to-item index of the score-correlation view (module docstring): a cosine index over ``x W``,
    ``W = correlation_transform(user_vectors)``, built, tuned and self-checked by ``build_index`` with ``options``
    (factory, recall floor, seed, ...; its self-check queries are items, the queries it answers). It is searched
    with plain item vectors: ``ItemIndex.transform`` maps them."""
    transform = correlation_transform(user_vectors)
    index = build_index(Transformed(vectors, transform), id_map, metric="cosine", **options)
    index.transform = transform
    index.manifest.update({"view": SCORE_CORRELATION, "users": int(len(user_vectors))})
    return index
