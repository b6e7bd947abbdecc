"""TF-IDF content vectors of coded features and their projection (``retrieval.data.content``), against NumPy."""

import numpy as np
import scipy.sparse as sp

from retrieval.data import content


def test_content_vectors_are_tf_idf_blocks_of_equal_weight():
    genres = np.array([[0, 0], [0, 0], [1, 2], [1, 1], [3, 0]], np.int32)  # codes 1..3, 0 missing; row 3 twice
    year = np.array([0, 0, 1.0, -1.0, 0.5], np.float32)
    got = content.content_vectors({"genres": genres, "year": year}).toarray()
    n = 5
    documents = np.array([2, 1, 1])  # rows holding each code, once per row
    idf = np.log((1 + n) / (1 + documents)) + 1
    counts = np.zeros((n, 3))
    for row, codes in enumerate(genres):
        for code in codes[codes > 0]:
            counts[row, code - 1] += 1
    block = counts * idf
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    block = np.divide(block, norms, out=np.zeros_like(block), where=norms > 0)
    # year: its non-zero values cut at their deciles (three values: a bin each), the bin a term with its IDF
    edges = np.unique(np.quantile(year[year != 0], np.arange(1, 10) / 10).astype(np.float32))
    assert len(edges) == 9
    numeric = np.zeros((n, 10))
    numeric[year != 0, np.searchsorted(edges, year[year != 0], "right")] = 1.0  # one term: unit after normalising
    expected = np.hstack([block, numeric])
    norms = np.linalg.norm(expected, axis=1, keepdims=True)
    expected = np.divide(expected, norms, out=np.zeros_like(expected), where=norms > 0)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert [(b.name, b.numeric, b.offset, b.width) for b in content.layout({"genres": genres, "year": year})] == [
        ("genres", False, 0, 3), ("year", True, 3, 10)]


def test_a_numeric_feature_is_its_quantile_bin_not_its_sign():
    years = np.arange(1900, 2000)
    standardized = ((years - years.mean()) / years.std()).astype(np.float32)  # mean 1949.5: no value is exactly 0
    vectors = content.content_vectors({"year": standardized}).toarray()
    similarity = vectors @ vectors.T
    row = dict(zip(years.tolist(), range(len(years)), strict=True))
    assert similarity[row[1951], row[1952]] == 1.0 and similarity[row[1951], row[1999]] == 0.0  # the sign: 1 and 1
    bins = vectors.argmax(axis=1)
    assert np.array_equal(bins, np.repeat(np.arange(10), 10))  # deciles, in order of value
    # The catalogue's edges code new values; each column of a two-column feature is cut on its own.
    both = np.stack([standardized, -standardized], axis=1)
    blocks = content.layout({"both": both})
    assert blocks[0].width == 20
    new = np.array([[-9.0, 9.0], [0.0, 0.01], [9.0, 0.0]], np.float32)
    assert content.numeric_codes(new, blocks[0].edges).tolist() == [[1, 20], [0, 16], [10, 0]]


def test_the_projection_is_the_identity_for_few_terms_and_the_top_singular_vectors_otherwise():
    rng = np.random.default_rng(0)
    small = sp.csr_matrix(rng.random((20, 5)))
    np.testing.assert_array_equal(content.projection(small, 8), np.eye(5))
    # Rank 6 in 40 terms: 6 coordinates keep every dot product.
    low_rank = sp.csr_matrix(rng.normal(size=(300, 6)) @ rng.normal(size=(6, 40)))
    basis = content.projection(low_rank, 6, seed=3)
    assert basis.shape == (40, 6)
    np.testing.assert_allclose(basis.T @ basis, np.eye(6), atol=1e-8)
    dense = low_rank.toarray()
    projected = dense @ basis
    np.testing.assert_allclose(projected @ projected.T, dense @ dense.T, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(basis, content.projection(low_rank, 6, seed=3))  # seeded
