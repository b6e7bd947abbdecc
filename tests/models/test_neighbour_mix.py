"""NeighbourMix: each row plus the weighted sum of its neighbours' rows, against NumPy, with its gradient."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import tensorflow as tf

from retrieval.models.layers import NeighbourMix


def test_each_row_gains_its_neighbours_weighted_rows_and_their_gradient():
    rng = np.random.default_rng(0)
    table = tf.keras.layers.Embedding(6, 3, embeddings_initializer=tf.keras.initializers.RandomNormal(seed=1))
    neighbours = rng.integers(0, 6, (6, 2)).astype(np.int32)
    weights = rng.random((6, 2)).astype(np.float32)
    weights[0] = 0  # padding: no neighbours
    mix = NeighbourMix(neighbours, weights)
    rows = tf.constant([[3, 0], [5, 1]])
    with tf.GradientTape() as tape:
        out = mix(table, rows)
        loss = tf.reduce_sum(out * tf.constant(np.arange(12, dtype=np.float32).reshape(2, 2, 3)))
    e = table.embeddings.numpy()
    expected = e[rows.numpy()] + np.einsum("bhk,bhkd->bhd", weights[rows.numpy()], e[neighbours[rows.numpy()]])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    # d loss / d e_j: the upstream of every position where j is read, times 1 as itself or w as a neighbour
    upstream = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    grad = np.zeros_like(e)
    for b in range(2):
        for h in range(2):
            row = rows.numpy()[b, h]
            grad[row] += upstream[b, h]
            for k in range(2):
                grad[neighbours[row, k]] += weights[row, k] * upstream[b, h]
    got = tape.gradient(loss, table.embeddings)
    np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), grad, rtol=1e-5)
