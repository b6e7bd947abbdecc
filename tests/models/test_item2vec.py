"""Item2Vec: planted-cluster recovery, the noise distribution and the compiled SGD loop against references
(autodiff of ``losses.sgns``), determinism and exact resumption, Hogwild threads, training without TensorFlow,
export round trip, the two-tower initializer."""

import subprocess
import sys
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import retrieval  # noqa: F401
from retrieval.data import Vocabulary, skipgram_pairs
from retrieval.errors import InputError
from retrieval.export import export_item2vec, load_user_encoder, read_item_embeddings
from retrieval.losses import sgns
from retrieval.models import item2vec, item2vec_train

NUM_CLUSTERS, CLUSTER_SIZE = 4, 12


def _planted(num_users=240, length=16, seed=0):
    """Each user's sequence draws items from one cluster (Zipf-like popularity inside the cluster)."""
    rng = np.random.default_rng(seed)
    cluster = rng.integers(NUM_CLUSTERS, size=num_users)
    weights = 1.0 / np.arange(1, CLUSTER_SIZE + 1) ** 0.5
    within = rng.choice(CLUSTER_SIZE, size=(num_users, length), p=weights / weights.sum())
    items = np.char.add("i", (cluster[:, None] * CLUSTER_SIZE + within).astype(str)).ravel()
    users = np.repeat(np.arange(num_users), length)
    vocab = Vocabulary.from_ids(items)
    return users, vocab.lookup(items), np.tile(np.arange(length), num_users), vocab


def _config(**overrides):
    config = item2vec.default_item2vec_config()
    config.update(dict(dim=16, window=3, negatives=5, negative_group=8, subsample=0.0, epochs=4, batch_size=128,
                       learning_rate=0.05, log_every_steps=20, checkpoint_every_steps=20, seed=3))
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def planted():
    users, items, times, vocab = _planted()
    return users, items, times, vocab, item2vec.train_item2vec(_config(), users, items, times, vocab)


def _cluster_of(vocab):
    return np.array([int(i[1:]) // CLUSTER_SIZE for i in vocab.ids[2:]])


def test_planted_clusters_are_recovered(planted):
    _, _, _, vocab, vectors = planted
    unit = vectors[2:] / np.linalg.norm(vectors[2:], axis=1, keepdims=True)
    cosine = unit @ unit.T
    cluster = _cluster_of(vocab)
    same = cluster[:, None] == cluster[None, :]
    off_diagonal = ~np.eye(len(cluster), dtype=bool)
    within, between = cosine[same & off_diagonal].mean(), cosine[~same].mean()
    assert within - between > 0.5, (within, between)
    # Nearest neighbours: every item's 5 most similar items are of its own cluster.
    np.fill_diagonal(cosine, -np.inf)
    neighbours = np.argsort(-cosine, axis=1)[:, :5]
    assert (cluster[neighbours] == cluster[:, None]).mean() > 0.95


def test_untrained_vectors_show_no_clusters(planted):
    """The statistic above is not satisfied by the initialisation (so it measures training)."""
    _, _, _, vocab, _ = planted
    vectors = item2vec_train.table_vectors(*item2vec_train.initial_tables(vocab.size, 16, seed=3), "input")
    unit = vectors[2:] / np.linalg.norm(vectors[2:], axis=1, keepdims=True)
    cluster = _cluster_of(vocab)
    same = cluster[:, None] == cluster[None, :]
    cosine = unit @ unit.T
    assert abs(cosine[same & ~np.eye(len(cluster), dtype=bool)].mean() - cosine[~same].mean()) < 0.1


def test_noise_sampler_matches_count_power(planted):
    counts = np.array([0, 0, 1000, 300, 80, 20, 5, 1, 0, 7], np.int64)  # index 8: a zero count, never drawn
    sampler = item2vec_train.NoiseSampler(counts, 0.75)
    draws = sampler.sample(200_000, 711)
    observed = np.bincount(draws, minlength=len(counts))
    assert observed[[0, 1, 8]].sum() == 0
    support = counts > 0
    expected = len(draws) * counts[support] ** 0.75 / (counts[support] ** 0.75).sum()
    chi2 = ((observed[support] - expected) ** 2 / expected).sum()
    dof = support.sum() - 1
    assert chi2 < dof + 5 * np.sqrt(2 * dof), chi2
    # The same draws are far from the undistorted unigram distribution (the test can fail).
    unigram = len(draws) * counts[support] / counts[support].sum()
    assert ((observed[support] - unigram) ** 2 / unigram).sum() > 100 * (dof + 5 * np.sqrt(2 * dof))
    # Stateless: the same seed gives the same draws, another seed others.
    again, other = sampler.sample(200_000, 711), sampler.sample(200_000, 712)
    assert np.array_equal(draws, again) and not np.array_equal(draws, other)


def test_training_draws_negatives_from_the_configured_noise(planted):
    users, items, times, vocab, _ = planted
    with mock.patch.object(item2vec_train, "NoiseSampler", wraps=item2vec_train.NoiseSampler) as spy, \
            mock.patch.object(item2vec_train, "train_epochs"):
        item2vec.train_item2vec(_config(noise_exponent=0.5), users, items, times, vocab)
    (counts, alpha), _ = spy.call_args
    assert np.array_equal(counts, vocab.counts) and alpha == 0.5


@pytest.mark.parametrize("group", [1, 2])
def test_steps_are_per_pair_sgd_on_the_sgns_loss(group):
    """Two steps of the compiled loop equal, pair by pair in order, an SGD step of size lr on ``losses.sgns`` of the
    pair (gradients by autodiff at the rows before the update; repeated rows accumulate), with the negatives of the
    step's stream shared by ``group`` consecutive pairs and lr = lr_start + lr_slope * step; the returned loss is
    the sum over the pairs at multiples of LOSS_EVERY."""
    batch, negatives, dim, key, lr_start, lr_slope = 4, 3, 5, 99, 0.5, -0.1
    counts = np.array([0, 0, 9, 5, 4, 3, 2, 1])
    sampler = item2vec_train.NoiseSampler(counts)
    rng = np.random.default_rng(group)
    target = rng.normal(size=(8, dim)).astype(np.float32)
    context = rng.normal(size=(8, dim)).astype(np.float32)
    targets = np.array([2, 3, 2, 4, 5, 2, 7], np.int32)  # 2 steps, the second one short
    contexts = np.array([3, 2, 4, 2, 2, 6, 3], np.int32)
    expected = [target.copy(), context.copy()]
    total = 0.0
    for step in range(2):
        stream_key = (key + step * 0x9E3779B97F4A7C15) % 2**64
        drawn = sampler.sample(negatives * -(-batch // group), stream_key).reshape(-1, negatives)
        for p in range(step * batch, min(step * batch + batch, len(targets))):
            tables = [tf.Variable(t) for t in expected]
            with tf.GradientTape() as tape:
                loss = sgns(tf.gather(tables[0], targets[p:p + 1]), tf.gather(tables[1], contexts[p:p + 1]),
                            tf.gather(tables[1], drawn[(p - step * batch) // group][None]))
            total += float(loss[0]) if p % item2vec_train.LOSS_EVERY == 0 else 0.0
            lr = lr_start + lr_slope * step
            expected = [t - lr * tf.convert_to_tensor(g).numpy()
                        for t, g in zip(expected, tape.gradient(loss, tables), strict=True)]
    got = item2vec_train.sgns_steps(target, context, targets, contexts, sampler.prob, sampler.alias, negatives,
                                    group, batch, np.uint64(key), 0, 2, lr_start, lr_slope)
    assert got == pytest.approx(total, rel=1e-5)
    np.testing.assert_allclose(target, expected[0], atol=1e-5)
    np.testing.assert_allclose(context, expected[1], atol=1e-5)


def test_learning_rate_decays_linearly_over_all_steps(planted):
    """train_epochs gives step s of epoch e the rate lr0 + (lr1 - lr0) (e + s / steps) / epochs."""
    users, items, times, vocab, _ = planted
    config = _config(epochs=2, batch_size=256, log_every_steps=1000)
    calls = []

    def spy(*args):
        calls.append(args[10:])  # first_step, num_steps, lr_start, lr_slope
        return 0.0

    with mock.patch.object(item2vec_train, "sgns_steps", spy):
        item2vec.train_item2vec(config, users, items, times, vocab)
    for epoch, (first, count, lr_start, lr_slope) in enumerate(calls):
        assert first == 0
        for s in (0, count - 1):
            fraction = (epoch + s / count) / config.epochs
            assert lr_start + lr_slope * s == pytest.approx(
                config.learning_rate + (config.min_learning_rate - config.learning_rate) * fraction)


def test_hogwild_threads_train_as_well(planted):
    """Two threads (not reproducible) still recover the planted clusters."""
    users, items, times, vocab, _ = planted
    vectors = item2vec.train_item2vec(_config(threads=2, batch_size=32), users, items, times, vocab)
    unit = vectors[2:] / np.linalg.norm(vectors[2:], axis=1, keepdims=True)
    cluster = _cluster_of(vocab)
    same = cluster[:, None] == cluster[None, :]
    assert (unit @ unit.T)[same & ~np.eye(len(cluster), dtype=bool)].mean() - (unit @ unit.T)[~same].mean() > 0.5


def test_training_without_checkpoints_imports_no_tensorflow():
    code = ("import sys, numpy as np; from retrieval.data import Vocabulary; from retrieval.models import item2vec;"
            " items = np.char.add('i', (np.arange(400) % 7).astype(str)); vocab = Vocabulary.from_ids(items);"
            " config = item2vec.default_item2vec_config(); config.update(dict(dim=8, epochs=1, batch_size=64));"
            " item2vec.train_item2vec(config, np.repeat(np.arange(40), 10), vocab.lookup(items), None, vocab);"
            " assert 'tensorflow' not in sys.modules, 'tensorflow was imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_deterministic_under_a_seed(planted):
    users, items, times, vocab, vectors = planted
    again = item2vec.train_item2vec(_config(), users, items, times, vocab)
    other = item2vec.train_item2vec(_config(seed=4), users, items, times, vocab)
    assert np.array_equal(vectors, again)
    assert not np.allclose(vectors, other)


def test_resume_continues_the_same_run(planted, tmp_path):
    """Interrupted mid-epoch and resumed from the checkpoint: the same vectors as the uninterrupted run; a finished
    run returns its vectors without training. (Also exercises subsampling.)"""
    users, items, times, vocab, _ = planted
    config = _config(subsample=0.02, batch_size=512, negative_group=64, epochs=2, log_every_steps=1,
                     checkpoint_every_steps=1)
    straight = item2vec.train_item2vec(config, users, items, times, vocab)
    real_steps, calls = item2vec_train.sgns_steps, []

    def interrupted(*args):
        calls.append(args[10])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_steps(*args)

    with mock.patch.object(item2vec_train, "sgns_steps", interrupted), pytest.raises(KeyboardInterrupt):
        item2vec.train_item2vec(config, users, items, times, vocab, checkpoint_dir=tmp_path)
    resumed = item2vec.train_item2vec(config, users, items, times, vocab, checkpoint_dir=tmp_path)
    np.testing.assert_array_equal(resumed, straight)
    with mock.patch.object(item2vec_train, "train_epochs", side_effect=AssertionError("trained again")):
        np.testing.assert_array_equal(item2vec.train_item2vec(config, users, items, times, vocab,
                                                              checkpoint_dir=tmp_path), straight)


def test_export_round_trip(planted, tmp_path):
    _, _, _, vocab, vectors = planted
    fields = export_item2vec(vectors, vocab, tmp_path, max_history=4)
    assert fields == {"metric": "cosine", "max_history": 4, "inference_part_size": 0, "dimension": 16}
    ids, stored = read_item_embeddings(tmp_path / "item_embeddings.parquet")
    assert list(ids) == list(vocab.ids[2:])
    np.testing.assert_array_equal(stored, vectors[2:])
    encoder = load_user_encoder(tmp_path)
    histories = [["i3", "i0", "i5"], ["i7", "unknown", ""], ["i1", "i2", "i4", "i6", "i8"], []]
    got = encoder.encode(["u1", "u2", "u3", "u4"], histories)
    lookup = dict(zip(vocab.ids[2:], vectors[2:], strict=True))
    expected = [np.mean([lookup[i] for i in h[:4] if i in lookup], axis=0) if h else np.zeros(16) for h in histories]
    np.testing.assert_allclose(got, np.array(expected), atol=1e-6)


def test_export_rejects_misaligned_vectors(planted, tmp_path):
    _, _, _, vocab, vectors = planted
    with pytest.raises(InputError):
        export_item2vec(vectors[2:], vocab, tmp_path, max_history=4)


def test_initializer_starts_a_table_from_the_vectors(planted):
    _, _, _, vocab, vectors = planted
    layer = tf.keras.layers.Embedding(vocab.size, 16, embeddings_initializer=item2vec.item2vec_initializer(vectors))
    layer.build(None)
    np.testing.assert_array_equal(layer.embeddings.numpy(), vectors)
    scaled = item2vec.item2vec_initializer(vectors, norm=0.2)([vocab.size, 16]).numpy()
    assert np.linalg.norm(scaled[2:], axis=1).mean() == pytest.approx(0.2, rel=1e-5)
    np.testing.assert_allclose(scaled[2:] / np.linalg.norm(scaled[2:], axis=1, keepdims=True),
                               vectors[2:] / np.linalg.norm(vectors[2:], axis=1, keepdims=True), atol=1e-6)
    with pytest.raises(InputError):
        item2vec.item2vec_initializer(vectors)([vocab.size, 8])


@pytest.mark.parametrize("key,value", [("negative_group", 3), ("window", 0), ("vectors", "output")])
def test_config_errors_are_input_errors(planted, key, value):
    users, items, times, vocab, _ = planted
    with pytest.raises(InputError):
        item2vec.train_item2vec(_config(**{key: value}), users, items, times, vocab)


def test_epoch_pairs_are_the_skipgram_pairs_shuffled():
    """Without the dynamic window and subsampling, an epoch holds exactly ``skipgram_pairs``' pairs (pad/OOV
    dropped), in a seeded order."""
    rng = np.random.default_rng(0)
    users = np.sort(rng.integers(0, 30, 500))
    items = rng.integers(0, 20, 500).astype(np.int32)  # indices 0 and 1 (pad, OOV) included
    config = _config(window=3, shrink_window=False, subsample=0.0)
    targets, contexts = item2vec_train.epoch_pairs(users, items, np.ones(20), config, 0)
    reference = skipgram_pairs(users, items, window=3)
    pairs = sorted(zip(targets, contexts, strict=True))
    assert pairs == sorted(zip(reference["target"], reference["context"], strict=True))
    again = item2vec_train.epoch_pairs(users, items, np.ones(20), config, 0)
    other = item2vec_train.epoch_pairs(users, items, np.ones(20), config, 1)
    assert np.array_equal(targets, again[0]) and not np.array_equal(targets, other[0])


def test_shrink_window_weights_pairs_by_distance():
    """word2vec's dynamic window: a pair k positions apart is kept with probability (window - k + 1) / window."""
    num_users, length, window = 3000, 12, 4
    users = np.repeat(np.arange(num_users), length)
    items = np.tile(np.arange(2, length + 2), num_users)  # the item index encodes the position
    counts = np.r_[0, 0, np.full(length, num_users)]
    full = item2vec_train.epoch_pairs(users, items, counts, _config(window=window, shrink_window=False), 0)
    shrunk = item2vec_train.epoch_pairs(users, items, counts, _config(window=window, shrink_window=True), 0)
    distance = [np.bincount(np.abs(t - c), minlength=window + 2) for t, c in (full, shrunk)]
    assert distance[0][window + 1:].sum() == 0 and distance[1][window + 1:].sum() == 0
    kept = distance[1][1:window + 1] / distance[0][1:window + 1]
    expected = (window - np.arange(1, window + 1) + 1) / window
    # Users draw their window independently: the kept fraction at each distance is a mean of num_users draws.
    tolerance = 5 * np.sqrt(expected * (1 - expected) / num_users) + 1e-9
    assert np.all(np.abs(kept - expected) <= tolerance), (kept, expected)


def test_divergence_is_reported(planted):
    users, items, times, vocab, _ = planted
    with pytest.raises(InputError, match="diverged"):
        item2vec.train_item2vec(_config(learning_rate=100.0, epochs=1), users, items, times, vocab)
