"""EmbeddingTable: large tables filled in place, block by block (retrieval/models/layers.py)."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from retrieval.models import layers


def _table(rows: int, seed: int, dim: int = 8) -> np.ndarray:
    table = layers.EmbeddingTable(rows, dim, embeddings_initializer=layers.Initializers(seed).embedding())
    table.build(None)
    return table.embeddings.numpy()


@pytest.fixture
def in_place(monkeypatch):
    """Every table filled in place, in blocks of 5 rows of 8 floats."""
    monkeypatch.setattr(layers, "IN_PLACE_MIN_BYTES", 0)
    monkeypatch.setattr(layers, "IN_PLACE_BLOCK_BYTES", 5 * 8 * 4)


def test_small_tables_keep_the_stock_initialiser():
    stock = tf.keras.layers.Embedding(23, 8, embeddings_initializer=layers.Initializers(3).embedding())
    stock.build(None)
    np.testing.assert_array_equal(_table(23, 3), stock.embeddings.numpy())


def test_in_place_fill_is_uniform_seeded_and_drawn_per_block(in_place):
    table = _table(23, 3)
    assert table.shape == (23, 8) and -0.05 <= table.min() and table.max() < 0.05
    np.testing.assert_array_equal(table, _table(23, 3))  # the same seed, the same table
    assert not np.array_equal(table, _table(23, 4))
    assert not np.array_equal(table[:5], table[5:10])  # each block its own draw
    # Uniform on [-0.05, 0.05): mean 0 and standard deviation 0.1 / sqrt(12) = 0.0289, over 184 draws.
    assert abs(table.mean()) < 0.01 and abs(table.std() - 0.0289) < 0.005


def test_under_a_strategy_the_stock_path_is_kept(in_place):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        table = layers.EmbeddingTable(23, 8, embeddings_initializer=layers.Initializers(3).embedding())
        table.build(None)
    stock = tf.keras.layers.Embedding(23, 8, embeddings_initializer=layers.Initializers(3).embedding())
    stock.build(None)
    np.testing.assert_array_equal(table.embeddings.numpy(), stock.embeddings.numpy())


def test_in_place_fill_needs_less_memory_than_the_stock_initialiser():
    """Peak RSS rise of building a 256 MiB table in a fresh process: the stock RandomUniform holds about three
    table-sized tensors at once, the in-place fill the table and a few 32 MiB blocks."""
    script = ("import sys; import retrieval; from retrieval.models import layers; from retrieval.memory import "
              "peak_rss_mb; layers.IN_PLACE_MIN_BYTES = int(sys.argv[1]); before = peak_rss_mb(); "
              "t = layers.EmbeddingTable(1 << 19, 128, embeddings_initializer=layers.Initializers(0).embedding()); "
              "t.build(None); print(peak_rss_mb() - before)")
    rise = {name: float(subprocess.run([sys.executable, "-c", script, str(threshold)], capture_output=True, text=True,
                                       check=True).stdout.split()[-1])
            for name, threshold in (("in_place", 0), ("stock", 1 << 62))}
    assert rise["in_place"] < 1.6 * 256 and 2.4 * 256 < rise["stock"]
