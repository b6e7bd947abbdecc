"""Towers and objectives of the two-tower model, against hand computations, TFRS and TensorFlow references."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_recommenders as tfrs

from retrieval import losses
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError
from retrieval.models import build_model, default_config
from retrieval.models.layers import Initializers, interleaved_parts, masked_mean, sum_over_positions
from retrieval.models.layout import ScoreLayout
from retrieval.models.part_settings import ItemTowerSettings
from retrieval.models.towers import ItemTower
from retrieval.sampling.frequency import static_log_q

V_ITEMS, V_USERS, B, H = 14, 9, 8, 5


@pytest.fixture(scope="module")
def vocabs():
    rng = np.random.default_rng(0)
    items = Vocabulary.from_ids([f"i{k}" for k in rng.zipf(1.5, 4000) % (V_ITEMS - 2)])
    users = Vocabulary.from_ids([f"u{k}" for k in range(V_USERS - 2)])
    assert items.size == V_ITEMS and users.size == V_USERS
    return items, users


@pytest.fixture(scope="module")
def features():
    rng = np.random.default_rng(1)
    item = {"brand": rng.integers(0, 4, V_ITEMS).astype(np.int32),
            "genres": rng.integers(0, 6, (V_ITEMS, 3)).astype(np.int32),
            "price": rng.normal(size=V_ITEMS).astype(np.float32)}
    user = {"age": rng.integers(0, 3, V_USERS).astype(np.int32)}
    for table in [*item.values(), *user.values()]:
        table[:2] = 0  # rows of <pad> and <oov>: "missing", as retrieval.data.features writes them
    return item, user


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(2)
    history = rng.integers(2, V_ITEMS, (B, H)).astype(np.int32)
    history[:, 3:] = 0
    history[0, 1] = 1  # an OOV position
    labels = rng.integers(2, V_ITEMS, B).astype(np.int32)
    labels[1] = labels[0]  # an in-batch duplicate: accidental hit
    return {"user": rng.integers(2, V_USERS, B).astype(np.int32), "history": history,
            "history_length": (history >= 2).sum(1).astype(np.int32), "label": labels,
            "example_age": rng.random(B).astype(np.float32)}


def small_config(**objective):
    config = default_config()
    config.embedding_dim = 6
    config.item_tower.id_embedding_dim = 6
    config.item_tower.feature_embedding_dim = 3
    config.user_tower.hidden_units = (8,)
    config.user_tower.feature_embedding_dim = 3
    config.temperature = 0.5
    for key, value in objective.items():
        config.objective[key] = value
    return config


def per_example(model, batch, training=False):
    query = model(batch)
    return model.objective(query, tf.constant(batch["label"]), training=training).numpy(), query


def test_item_tower_encodes_several_features_by_index(features):
    item_features, _ = features
    tower = ItemTower(V_ITEMS, ItemTowerSettings(5, id_embedding_dim=4, feature_embedding_dim=3), ScoreLayout(5),
                      Initializers(0), features=item_features)
    indices = np.array([2, 7, 7, 13])
    out = tower(tf.constant(indices))
    assert out.shape == (4, 5)
    np.testing.assert_allclose(out[1], out[2])  # gathered by index: same item, same vector
    encoded = tower.features(tf.constant(indices)).numpy()
    brand = tower.features._embeddings["brand"].embeddings.numpy()
    genres = tower.features._embeddings["genres"].embeddings.numpy()
    codes = item_features["genres"][indices]
    expected_genres = np.stack([genres[row[row > 0]].mean(0) if (row > 0).any() else np.zeros(3) for row in codes])
    # Features are concatenated in name order: brand, genres, price.
    np.testing.assert_allclose(encoded[:, :3], brand[item_features["brand"][indices]], rtol=1e-6)
    np.testing.assert_allclose(encoded[:, 3:6], expected_genres, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(encoded[:, 6], item_features["price"][indices])


def test_id_only_item_tower_is_the_normalised_embedding():
    tower = ItemTower(V_ITEMS, ItemTowerSettings(4, id_embedding_dim=4), ScoreLayout(4, normalized=True),
                      Initializers(0))
    out = tower(tf.range(V_ITEMS)).numpy()
    table = tower.id_embedding.embeddings.numpy()
    assert tower.mlp is None
    np.testing.assert_allclose(out, table / np.linalg.norm(table, axis=1, keepdims=True), rtol=1e-5)


def test_feature_table_with_wrong_rows_is_an_input_error():
    with pytest.raises(InputError, match="price"):
        ItemTower(V_ITEMS, ItemTowerSettings(4, id_embedding_dim=4), ScoreLayout(4), Initializers(0),
                  features={"price": np.zeros(3, np.float32)})


def test_masked_mean_ignores_masked_positions_and_empty_rows_are_zero():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    mask = np.array([[True, False, True], [False, False, False]])
    out = masked_mean(tf.constant(x), tf.constant(mask)).numpy()
    np.testing.assert_allclose(out[0], (x[0, 0] + x[0, 2]) / 2)
    np.testing.assert_allclose(out[1], 0.0)


@pytest.mark.parametrize("positions", [1, 10, 23, 50])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_sum_over_positions_is_reduce_sum_with_its_gradient(positions, jit_compile):
    """The chunked sum (XLA's fusible form) against ``tf.reduce_sum``: values and gradients, compiled and not."""
    rng = np.random.default_rng(positions)
    x = tf.constant(rng.normal(size=(3, positions, 4)).astype(np.float32))
    upstream = tf.constant(rng.normal(size=(3, 4)).astype(np.float32))

    def value_and_gradient(sum_fn):
        @tf.function(jit_compile=jit_compile)
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                total = sum_fn(x)
                loss = tf.reduce_sum(tf.square(total) * upstream)
            return total, tape.gradient(loss, x)
        return run(x)

    (total, gradient), (expected, expected_gradient) = (
        value_and_gradient(sum_over_positions), value_and_gradient(lambda x: tf.reduce_sum(x, axis=-2)))
    np.testing.assert_allclose(total.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy(), rtol=1e-5, atol=1e-5)
    x = np.arange(2 * positions * 3, dtype=np.float32).reshape(2, positions, 3)
    mask = rng.random((2, positions)) < 0.5
    np.testing.assert_allclose(masked_mean(tf.constant(x), tf.constant(mask), chunked=True).numpy(),
                               masked_mean(tf.constant(x), tf.constant(mask)).numpy(), rtol=1e-6)


def test_interleaved_parts_deal_the_valid_items_round_robin():
    history = np.array([[5, 6, 7, 8, 9, 10, 11], [5, 1, 6, 0, 7, 0, 0], [0, 0, 0, 0, 0, 0, 0]], np.int32)
    parts, used = interleaved_parts(tf.constant(history), 3)
    # 7 items -> 3 parts (r mod 3, slot r div 3); 3 valid items fit one part; an empty history uses one empty part
    np.testing.assert_array_equal(parts.numpy()[0], [[5, 8, 11], [6, 9, 0], [7, 10, 0]])
    np.testing.assert_array_equal(parts.numpy()[1], [[5, 6, 7], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(parts.numpy()[2], 0)
    np.testing.assert_array_equal(used.numpy(), [[True, True, True], [True, False, False], [True, False, False]])


@pytest.mark.parametrize("l2_normalize", [True, False])
def test_user_vectors_average_the_towers_vectors_of_the_parts(vocabs, l2_normalize):
    """Reference: the tower run on each part by hand; a history that fits one part is pooled as a whole."""
    config = small_config()
    config.l2_normalize = l2_normalize
    plain = build_model(config, *vocabs)
    parted = build_model(config, *vocabs, inference_part_size=2)
    user, history = tf.constant([3, 4]), tf.constant([[5, 6, 7, 8, 9], [5, 6, 0, 0, 0]])
    plain.user_vectors(user, history)
    parted.user_vectors(user, history)
    parted.set_weights(plain.get_weights())
    tower = [plain.user_vectors(tf.constant([3]), tf.constant([part])).numpy()[0]
             for part in ([5, 8, 0], [6, 9, 0], [7, 0, 0])]
    expected = np.mean(tower, axis=0)
    if l2_normalize:
        expected /= np.linalg.norm(expected)
    out = parted.user_vectors(user, history).numpy()
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[1], plain.user_vectors(user, history).numpy()[1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[0], plain.user_vectors(user, history).numpy()[0], atol=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_user_tower_masks_padding_and_oov(vocabs, features, pooling):
    items, users = vocabs
    config = small_config()
    config.user_tower.pooling = pooling
    config.user_tower.user_id_embedding_dim = 3
    model = build_model(config, items, users, *features)
    history = np.array([[5, 7, 0, 0], [5, 7, 1, 1], [5, 0, 7, 0], [5, 7, 0, 0]], np.int32)
    user = np.array([3, 3, 3, 1], np.int32)
    out = model.user_tower({"user": tf.constant(user), "history": tf.constant(history)}).numpy()
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5)  # OOV entries are masked
    np.testing.assert_allclose(out[0], out[2], rtol=1e-5)  # where the padding sits does not matter
    unknown = model.user_tower({"user": tf.constant([0, 1]), "history": tf.constant(history[:2])}).numpy()
    np.testing.assert_allclose(unknown[0], unknown[1], rtol=1e-5)  # pad and unknown users: same zero id vector
    assert out.shape == (4, 6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("share", [True, False])
def test_history_embeddings_shared_or_separate(vocabs, share):
    config = small_config()
    config.user_tower.share_item_embeddings = share
    config.user_tower.history_embedding_dim = 5
    model = build_model(config, *vocabs)
    assert (model.user_tower.history_embedding is model.item_tower.id_embedding) == share


def test_in_batch_matches_tfrs_retrieval_task(vocabs, features, batch):
    model = build_model(small_config(log_q="none"), *vocabs, *features)
    loss, query = per_example(model, batch)
    candidates = model.item_tower(tf.constant(batch["label"]))
    task = tfrs.tasks.Retrieval(temperature=0.5, remove_accidental_hits=True, loss=tf.keras.losses.
                                CategoricalCrossentropy(from_logits=True, reduction="none"))
    reference = task(query, candidates, candidate_ids=tf.constant(batch["label"]), compute_metrics=False)
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-5)


def test_in_batch_static_log_q_matches_tfrs_sampling_correction(vocabs, batch):
    items, users = vocabs
    model = build_model(small_config(log_q="static"), items, users)
    loss, query = per_example(model, batch)
    probability = np.exp(static_log_q(items.counts))[batch["label"]]
    task = tfrs.tasks.Retrieval(temperature=0.5, remove_accidental_hits=True, loss=tf.keras.losses.
                                CategoricalCrossentropy(from_logits=True, reduction="none"))
    reference = task(query, model.item_tower(tf.constant(batch["label"])), compute_metrics=False,
                     candidate_sampling_probability=tf.constant(probability), candidate_ids=tf.constant(batch["label"]))
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-5)


@pytest.mark.parametrize("log_q", ["estimated", "static"])
def test_mixed_negatives_use_the_mixture_correction(vocabs, batch, log_q):
    """Reference: TFRS Retrieval over batch + sampled columns with Q = Q_batch + Q_sampler for every column, both
    expected counts (estimated: probability of being in a batch; static: B * count / total)."""
    items, users = vocabs
    model = build_model(small_config(log_q=log_q, num_negatives=4), items, users)
    objective = model.objective
    labels = tf.constant(batch["label"])
    drawn = objective.sampler.sample(labels)
    objective.sampler.sample = lambda _: drawn  # replay one draw in the model and the reference
    sampled_ids, sampled_log_q, true_log_q = (t.numpy() for t in drawn)
    ids = np.r_[batch["label"], sampled_ids]
    if log_q == "estimated":
        objective.estimator.update(labels)
        batch_q = objective.estimator.probability(tf.constant(ids)).numpy()
    else:
        batch_q = B * items.counts[ids] / items.counts.sum()
    loss, query = per_example(model, batch)
    sampler_q = np.exp(np.r_[true_log_q, sampled_log_q])
    q = batch_q + sampler_q
    task = tfrs.tasks.Retrieval(temperature=0.5, remove_accidental_hits=True, loss=tf.keras.losses.
                                CategoricalCrossentropy(from_logits=True, reduction="none"))
    # TFRS clips probabilities to [1e-6, 1]; a common factor cancels in the softmax, so rescale Q below 1.
    reference = task(query, model.item_tower(tf.constant(ids)), candidate_ids=tf.constant(ids), compute_metrics=False,
                     candidate_sampling_probability=tf.constant(q / q.max(), tf.float32))
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-4)


def test_mixed_negatives_beyond_the_catalogue_draw_every_item_once(vocabs, batch):
    """configs/sequential.py mixes in 2,048 uniform negatives; a smaller catalogue is drawn whole, each item once,
    with the same expected count (TensorFlow's for a unique draw). Sampled softmax keeps its error for such a count."""
    items, users = vocabs
    model = build_model(small_config(num_negatives=10 * V_ITEMS, sampler="uniform"), items, users)
    sampled_ids, sampled_log_q, _ = (t.numpy() for t in model.objective.sampler.sample(tf.constant(batch["label"])))
    assert sorted(sampled_ids) == list(range(2, V_ITEMS))
    np.testing.assert_allclose(sampled_log_q, sampled_log_q[0])
    with pytest.raises(InputError, match="num_sampled"):
        build_model(small_config(name="sampled_softmax", num_negatives=10 * V_ITEMS), items, users)


def test_full_softmax_matches_numpy(vocabs, batch):
    model = build_model(small_config(name="full_softmax"), *vocabs)
    loss, query = per_example(model, batch)
    items = model.item_tower(tf.range(V_ITEMS)).numpy()
    logits = query.numpy() @ items[2:].T / 0.5
    log_z = np.log(np.exp(logits).sum(1))
    np.testing.assert_allclose(loss, log_z - logits[np.arange(B), batch["label"] - 2], rtol=1e-5)


def test_batch_weights_multiply_each_examples_full_softmax_loss(vocabs, batch):
    """Weighted teacher pairs (retrieval.data.set_examples): the loss is sum_i w_i l_i / B, l_i NumPy's."""
    model = build_model(small_config(name="full_softmax"), *vocabs)
    weight = np.linspace(0.2, 1.0, B).astype(np.float32)
    items = model.item_tower(tf.range(V_ITEMS)).numpy()
    logits = model(batch).numpy() @ items[2:].T / 0.5
    each = np.log(np.exp(logits).sum(1)) - logits[np.arange(B), batch["label"] - 2]
    loss = model.compute_loss({**batch, "weight": weight}, training=False).numpy()
    np.testing.assert_allclose(loss, (weight * each).sum() / B, rtol=1e-5)


def _with_fixed_draws(vocabs, batch, name: str, output_table: bool):
    """A model of objective ``name`` with 5 sampled negatives at temperature 1 (TF's references have none), its
    sampler's draw fixed so that a reference sees the same negatives, and non-zero output-table biases: returns
    (labels, (sampled ids, sampled log Q, true log Q), per-example loss, query, catalogue weights, biases)."""
    config = small_config(name=name, num_negatives=5, output_table=output_table)
    config.temperature = 1.0
    model = build_model(config, *vocabs)
    labels = tf.constant(batch["label"])
    drawn = model.objective.sampler.sample(labels)
    model.objective.sampler.sample = lambda _: drawn
    if output_table:  # non-zero biases, so that the test sees them
        model.output_table(labels)
        model.output_table.bias_table.embeddings.assign(tf.random.stateless_normal([V_ITEMS, 1], [3, 4]))
    loss, query = per_example(model, batch)
    if output_table:
        weights, biases = model.output_table(tf.range(V_ITEMS))
    else:
        weights, biases = model.item_tower(tf.range(V_ITEMS)), tf.zeros([V_ITEMS])
    return labels, drawn, loss, query, weights, biases


@pytest.mark.parametrize("output_table", [False, True])
def test_sampled_softmax_matches_tf_sampled_softmax_loss(vocabs, batch, output_table):
    labels, (sampled, sampled_log_q, true_log_q), loss, query, weights, biases = _with_fixed_draws(
        vocabs, batch, "sampled_softmax", output_table)  # tf.nn.sampled_softmax_loss has no temperature: T = 1
    reference = tf.nn.sampled_softmax_loss(
        weights, biases, tf.cast(labels[:, None], tf.int64), query, num_sampled=5, num_classes=V_ITEMS,
        sampled_values=(tf.cast(sampled, tf.int64), tf.exp(true_log_q)[:, None], tf.exp(sampled_log_q)),
        remove_accidental_hits=True)
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-4, atol=1e-5)


def test_output_table_scores_fold_bias_and_temperature(vocabs, batch):
    config = small_config(name="sampled_softmax", num_negatives=3, output_table=True)
    model = build_model(config, *vocabs)
    model.output_table(tf.constant([2]))
    model.output_table.bias_table.embeddings.assign(tf.random.stateless_normal([V_ITEMS, 1], [1, 2]))
    labels = tf.constant(batch["label"])
    users = model.user_vectors(tf.constant(batch["user"]), tf.constant(batch["history"]))
    scores = tf.reduce_sum(users * model.item_vectors(labels), axis=1).numpy()
    query = model.user_tower({"user": batch["user"], "history": batch["history"]})
    weights, bias = model.output_table(labels)
    expected = tf.reduce_sum(query * weights, axis=1) / config.temperature + bias
    np.testing.assert_allclose(scores, expected.numpy(), rtol=1e-5)
    assert model.metric == "ip"


def test_frequency_estimator_updates_once_per_train_step_only(vocabs, batch):
    model = build_model(small_config(log_q="estimated"), *vocabs)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1))
    data = tf.data.Dataset.from_tensor_slices(batch).batch(4)
    model.fit(data, epochs=1, verbose=0)
    assert int(model.objective.estimator.step) == 2
    model.evaluate(data, verbose=0)
    assert int(model.objective.estimator.step) == 2


def test_reported_loss_is_the_mean_per_example_loss(vocabs, batch):
    model = build_model(small_config(log_q="none"), *vocabs)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0))
    expected, _ = per_example(model, batch)
    logs = model.evaluate(tf.data.Dataset.from_tensor_slices(batch).batch(B), verbose=0, return_dict=True)
    np.testing.assert_allclose(logs["loss"], expected.mean(), rtol=1e-5)


@pytest.mark.parametrize("field, value", [("objective.name", "softmax"), ("objective.log_q", "dynamic"),
                                          ("user_tower.pooling", "max"), ("temperature", 0.0)])
def test_bad_config_is_an_input_error(vocabs, field, value):
    config = small_config()
    section, _, key = field.rpartition(".")
    (config[section] if section else config)[key] = value
    with pytest.raises(InputError, match=field.split(".")[-1]):
        build_model(config, *vocabs)


@pytest.mark.parametrize("objective", [dict(name="in_batch", output_table=True),
                                       dict(name="sampled_softmax", num_negatives=0)])
def test_inconsistent_objective_is_an_input_error(vocabs, objective):
    with pytest.raises(InputError):
        build_model(small_config(**objective), *vocabs)


def retrieval_loss(model, batch):
    """Full softmax over the exported scores ``user_vectors . item_vectors`` (temperature folded in for the
    output table)."""
    users = model.user_vectors(tf.constant(batch["user"]), tf.constant(batch["history"]))
    temperature = 1.0 if model.output_table is not None else model.temperature
    scores = losses.full_softmax(users, model.item_vectors(tf.range(V_ITEMS)), batch["label"], temperature)
    return float(scores.numpy().mean())


@pytest.mark.parametrize("objective", [
    dict(name="in_batch", log_q="estimated", num_negatives=3),
    dict(name="sampled_softmax", num_negatives=6, output_table=True),
    dict(name="full_softmax"),
    dict(name="nce", num_negatives=6), dict(name="nce", num_negatives=6, output_table=True),
    dict(name="nce", negatives="in_batch"), dict(name="nce", negatives="in_batch", num_negatives=3),
    dict(name="negative_sampling", num_negatives=6), dict(name="negative_sampling", negatives="in_batch"),
    dict(name="sampled_logistic", num_negatives=6, sampler="log_uniform"),
    dict(name="sampled_logistic", negatives="in_batch", log_q="estimated"),
    dict(name="full_logistic")])
def test_training_reduces_the_retrieval_loss(vocabs, features, batch, objective):
    model = build_model(small_config(**objective), *vocabs, *features)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
    before = retrieval_loss(model, batch)
    model.fit(tf.data.Dataset.from_tensor_slices(batch).repeat(8).batch(B), epochs=1, verbose=0)
    assert retrieval_loss(model, batch) < before


# ----- the binary objectives in the model: references and the logit bias -----

LOG_ITEMS = np.log(V_ITEMS - 2)


@pytest.mark.parametrize("name", ["nce", "sampled_logistic", "negative_sampling"])
@pytest.mark.parametrize("output_table", [False, True])
def test_sampled_binary_objectives_match_tf_nce_loss(vocabs, batch, name, output_table):
    """tf.nn.nce_loss with the item biases plus the logit bias, ``-log #items`` (NCE, sampled logistic) or ``-log
    S`` (NEG, whose expected counts are then fed as 1: no correction)."""
    labels, (sampled, sampled_log_q, true_log_q), loss, query, weights, biases = _with_fixed_draws(
        vocabs, batch, name, output_table)  # tf.nn.nce_loss has no temperature: T = 1
    if name == "negative_sampling":
        biases, sampled_log_q, true_log_q = biases - np.log(5.0), tf.zeros_like(sampled_log_q), tf.zeros_like(true_log_q)
    else:
        biases -= LOG_ITEMS
    reference = tf.nn.nce_loss(
        weights, biases, tf.cast(labels[:, None], tf.int64), query, num_sampled=5, num_classes=V_ITEMS,
        sampled_values=(tf.cast(sampled, tf.int64), tf.exp(true_log_q)[:, None], tf.exp(sampled_log_q)),
        remove_accidental_hits=name == "sampled_logistic")
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, log_q", [("nce", "static"), ("sampled_logistic", "static"),
                                         ("negative_sampling", "static")])
def test_in_batch_binary_objectives_use_the_batch_as_noise(vocabs, batch, name, log_q):
    """Per row: label 1 on its own column, 0 on the others (other ids only, for sampled logistic), corrected by the
    expected count among the row's B - 1 noise columns (none for NEG, which ignores log_q), logit bias -log #items
    (-log(B - 1) for NEG)."""
    items, users = vocabs
    model = build_model(small_config(name=name, negatives="in_batch", log_q=log_q), items, users)
    loss, query = per_example(model, batch)
    labels = batch["label"]
    columns = model.item_tower(tf.constant(labels)).numpy()
    logits = query.numpy() @ columns.T / 0.5
    if name == "negative_sampling":
        logits -= np.log(B - 1)
    else:
        logits -= LOG_ITEMS + np.log((B - 1) * items.counts[labels] / items.counts.sum())[None, :]
    expected = []
    for i in range(B):
        keep = np.arange(B) != i
        if name == "sampled_logistic":
            keep &= labels != labels[i]
        targets = np.r_[1.0, np.zeros(keep.sum())].astype(np.float32)
        row = np.r_[logits[i, i], logits[i, keep]].astype(np.float32)
        expected.append(tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(targets, row)).numpy())
    np.testing.assert_allclose(loss, np.array(expected), rtol=1e-4, atol=1e-5)


def test_full_logistic_is_sigmoid_cross_entropy_over_the_catalogue(vocabs, batch):
    model = build_model(small_config(name="full_logistic"), *vocabs)
    model.objective.logit_bias.bias.assign(0.4)  # the learned part of the logit bias
    loss, query = per_example(model, batch)
    logits = query.numpy() @ model.item_tower(tf.range(2, V_ITEMS)).numpy().T / 0.5 + 0.4 - LOG_ITEMS
    targets = tf.one_hot(batch["label"] - 2, V_ITEMS - 2)
    reference = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(targets, logits.astype(np.float32)), 1)
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-5)


def test_logit_bias_is_trained_and_exempt_from_weight_decay(vocabs, batch):
    model = build_model(small_config(name="nce", num_negatives=4), *vocabs)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
    model.fit(tf.data.Dataset.from_tensor_slices(batch).batch(B), epochs=1, verbose=0)
    bias = model.objective.logit_bias.bias
    assert any(v is bias for v in model.trainable_variables) and float(bias) != 0.0
    assert "bias" in bias.name


@pytest.mark.parametrize("objective", [dict(name="nce", negatives="in_batch", output_table=True),
                                       dict(name="full_logistic", output_table=True),
                                       dict(name="negative_sampling", num_negatives=0),
                                       dict(name="nce", negatives="random")])
def test_inconsistent_binary_objective_is_an_input_error(vocabs, objective):
    with pytest.raises(InputError):
        build_model(small_config(**objective), *vocabs)


def test_build_model_checks_the_cross_key_rules_declared_beside_the_keys(vocabs):
    """The builder raises what the pipeline's config check reports (``Key.needs``), naming the key: here the
    content-match term, which pools the history's features, with a pooling that reads the order."""
    config = small_config()
    config.item_tower.content_match = True
    config.user_tower.pooling = "self_attention"
    with pytest.raises(InputError, match="model.item_tower.content_match.*'mean' or 'attention'"):
        build_model(config, *vocabs)
