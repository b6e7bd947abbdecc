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

Measured on the bundled data with a seeded 10% of the items cold (``configs/catalogue.py``, genres; the generator's
own item clusters as the truth): among a cold item's 10 neighbours 48% share its cluster with the plain inner
product (none of them warm), 47% with the blocks summed (none warm), 56% with the correlation (15% warm); limited to
warm neighbours, 45% summed against 65% correlated (chance: 5%). Warm items' neighbours: 99.2% -> 99.7%. The
uncentred second moment ``x_i^T E[u u^T] x_j`` without normalisation let a few items into nearly every list.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from retrieval.errors import InputError
from retrieval.index.idmap import IdMap
from retrieval.index.item_index import ItemIndex, build_index
from retrieval.index.source import CHUNK_ROWS, VectorSource

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
