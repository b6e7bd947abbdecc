"""Content-profile coordinates: the content-based profile's score as fixed coordinates of the two towers' vectors.

With weight ``g`` the item vector gains ``sqrt(g) c_i`` and the user vector ``sqrt(g) p_u`` (see below for which
items), where ``c_i = P^T x_i``
is the item's TF-IDF content vector ``x_i`` (``retrieval.data.content``) projected on the top right singular vectors
``P`` of the catalogue's content matrix, and ``p_u`` the L2-normalised mean of ``c_i`` over the user's history. The
score becomes ``u^T v + g p_u^T c_i``: the towers' score plus ``g`` times the content profile's cosine (Lops et al.
2011, section 3.1; exact when the catalogue has at most ``dim`` terms, ``P = I``), in one inner-product index: a
weighted hybrid (Burke 2002, "Hybrid recommender systems: survey and experiments", section 3.1). Items nobody
clicked share every coordinate of their content with the items a user did click, token for token, which the
towers' learned embeddings of a token only approximate (tokens of cold items alone are never trained).

The term belongs to the item tower's cold head (``configs/catalogue.py``; the config checks refuse it without one):
only items placed by their features alone (cold items; dropped ids in training) carry the coordinates, warm items
rank as without them, and the term is in the training logits, so the one softmax over both blocks calibrates cold
scores against warm ones. On validation (MovieLens-1M with 10% of the movies cold, seeds 7 and 8, g 0.3; JOURNAL.md,
"Issue 35: the content profile in the cold head") among cold items recall@20 +0.008 and +0.005 over the head alone,
warm validation -0.005 and +0.005. A late fusion without the head (every item carrying the coordinates, zeros in
training) traded warm items for cold ones (among cold +0.011, warm -0.013 on both seeds; "Issue 35: the content
profile") and was removed as a lever that lost (issue 51).

``lookup(indices)`` reads the catalogue's coordinates (computed once, at build, from its TF-IDF matrix);
``encode(values)`` computes them from coded feature values, so the exported item tower embeds the items of a new
catalogue table the same way (``retrieval.jobs.refresh``). Written by hand: none of the dependencies projects TF-IDF
vectors in a graph.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import tensorflow as tf

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.data import content
from retrieval.models.layers import masked_mean


class ContentProfile(tf.keras.layers.Layer):
    """Fixed content coordinates of items ``[..., k]`` and of user histories ``[B, k]`` (module docstring)."""

    def __init__(self, tables: Mapping[str, np.ndarray], dim: int, weight: float, seed: int = 0,
                 name: str = "content_profile"):
        """``tables``: the catalogue's per-index feature tables (``FeatureTables``' input); ``dim``: the most
        coordinates (fewer when the catalogue has fewer terms); ``weight``: ``g``; ``seed``: the SVD's start."""
        super().__init__(name=name, trainable=False)
        self.blocks = content.layout(tables)
        vectors = content.content_vectors(tables, self.blocks)
        basis = content.projection(vectors, dim, seed).astype(np.float32)
        self.dim = int(basis.shape[1])
        self.scale = float(np.sqrt(weight))
        self._weights, self._idf = {}, {}
        for block in self.blocks:  # row c: code c's column of P times its IDF; code 0 (missing) a zero row
            rows = basis[block.offset:block.offset + block.width]
            rows = np.concatenate([np.zeros([1, self.dim], np.float32), rows * block.idf[1:, None]])
            self._idf[block.name] = tf.constant(block.idf, tf.float32)
            self._weights[block.name] = tf.constant(rows, tf.float32)
        # The catalogue's coordinates from its TF-IDF matrix at hand; ``encode`` computes the same from codes.
        self.catalogue = tf.Variable(np.asarray(vectors @ basis, np.float32), trainable=False, name="catalogue")

    def encode(self, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        """``P^T x`` [N, k] of coded feature values (each ``[N]`` or ``[N, M]``, as ``FeatureTables`` holds them;
        numeric values binned at the catalogue's edges): each feature's block L2-normalised, then the row, as
        ``content.content_vectors`` does before projecting."""
        total, blocks_present = 0.0, 0.0
        for block in self.blocks:
            coded = tf.convert_to_tensor(values[block.name])
            codes = (self._bins(block, coded) if block.numeric
                     else tf.reshape(tf.cast(coded, tf.int32), [tf.shape(coded)[0], -1]))
            codes = tf.where(codes > block.width, 0, codes)  # codes no catalogue item had: no column
            idf = tf.gather(self._idf[block.name], codes)
            # |counts * idf|^2 = sum over position pairs holding the same code of idf^2.
            same = tf.cast(tf.equal(codes[:, :, None], codes[:, None, :]), tf.float32)
            norm = tf.sqrt(tf.einsum("nl,nlm,nm->n", idf, same, idf))
            projected = tf.reduce_sum(tf.gather(self._weights[block.name], codes), axis=1)
            present = norm > 0
            total += projected / tf.where(present, norm, 1.0)[:, None]
            blocks_present += tf.cast(present, tf.float32)
        return total / tf.sqrt(tf.maximum(blocks_present, 1.0))[:, None]

    @staticmethod
    def _bins(block: content.Block, values: tf.Tensor) -> tf.Tensor:
        """Codes [N, k] of a numeric block's values ([N] or [N, k]): ``content.numeric_codes`` in the graph."""
        columns = tf.reshape(tf.cast(values, tf.float32), [tf.shape(values)[0], len(block.edges)])
        codes, first = [], 1
        for j, edges in enumerate(block.edges):
            column = columns[:, j]
            place = (tf.searchsorted(tf.constant(edges, tf.float32), column, side="right") if len(edges)
                     else tf.zeros_like(column, tf.int32))
            codes.append(tf.where(column != 0, first + place, 0))
            first += len(edges) + 1
        return tf.stack(codes, axis=1)

    def lookup(self, indices: tf.Tensor) -> tf.Tensor:
        """The catalogue's coordinates of item indices [...] -> [..., k], times ``sqrt(g)``."""
        return self.scale * tf.gather(self.catalogue, indices)

    def history_mean(self, history: tf.Tensor, mask: tf.Tensor, *, chunked: bool = False) -> tf.Tensor:
        """[B, k]: the mean coordinates of the history's valid positions; ``p_u`` is it L2-normalised, which the user
        tower does with the rest of its output (``UserTower.normalize``, also for a mean over history parts)."""
        return masked_mean(tf.gather(self.catalogue, history), mask, chunked=chunked)
