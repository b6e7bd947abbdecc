"""Export: the user-tower SavedModel in a fresh process, item embeddings Parquet, the mean-pooling encoder."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from retrieval import export
from retrieval.artifacts import RunPaths
from retrieval.data.vocab import Vocabulary
from retrieval.errors import InputError
from retrieval.models import build_model, default_config

H = 4
USERS = ["u3", "nobody", "u1", "u5"]
HISTORIES = [["i2", "unknown", "i7"], [], ["i1"] * 9, ["i4", "i5", "i6", "i7", "i8", "i9"]]


@pytest.fixture(scope="module")
def vocabs():
    rng = np.random.default_rng(0)
    items = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, 12, 300)])
    users = Vocabulary.from_ids([f"u{k}" for k in range(8)])
    return items, users


def reference_vectors(model, items, users):
    """The in-memory model on the same inputs: histories truncated to H, unknown ids -> OOV (masked)."""
    history = np.zeros([len(HISTORIES), H], np.int64)
    for row, ids in enumerate(HISTORIES):
        history[row, :min(len(ids), H)] = items.lookup(ids[:H])
    return model.user_vectors(tf.constant(users.lookup(USERS), tf.int32), tf.constant(history, tf.int32)).numpy()


@pytest.fixture(scope="module")
def exported(vocabs, tmp_path_factory):
    items, users = vocabs
    config = default_config()
    config.embedding_dim, config.item_tower.id_embedding_dim, config.max_history = 6, 6, H
    config.user_tower.hidden_units = (8,)
    config.user_tower.user_id_embedding_dim = 3
    model = build_model(config, items, users, user_features={"group": np.r_[0, 0, np.arange(users.size - 2) % 3].astype(np.int32)})
    run = tmp_path_factory.mktemp("run")
    fields = export.export_two_tower(model, items, users, run)
    return model, RunPaths(run), fields


def test_user_tower_loads_in_a_fresh_process_with_the_same_embeddings(vocabs, exported, tmp_path):
    model, paths, _ = exported
    script = (
        "import json, sys, numpy as np, tensorflow as tf\n"
        f"loaded = tf.saved_model.load({str(paths.user_tower)!r})\n"
        "users, histories = json.loads(sys.argv[1])\n"
        "padded = [h[:{H}] + [''] * ({H} - len(h[:{H}])) for h in histories]\n"
        "out = loaded.signatures['serving_default'](user_id=tf.constant(users), history=tf.constant(padded))\n"
        "np.save(sys.argv[2], out['embedding'].numpy())\n").replace("{H}", str(H))
    # Plain TensorFlow (no `retrieval` import): what TF Serving or another consumer sees.
    subprocess.run([sys.executable, "-c", script, json.dumps([USERS, HISTORIES]), str(tmp_path / "out.npy")],
                   check=True, timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": ""})
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference_vectors(model, *vocabs), rtol=1e-5,
                               atol=1e-6)


def test_user_encoder_pads_truncates_and_batches(vocabs, exported):
    model, paths, fields = exported
    encoder = export.load_user_encoder(paths.root, batch_size=3)  # a run directory works too
    assert (encoder.dimension, encoder.max_history, encoder.metric) == (6, H, "cosine")
    assert fields == {"metric": "cosine", "max_history": H, "inference_part_size": 0, "dimension": 6}
    vectors = encoder.encode(USERS, HISTORIES)
    np.testing.assert_allclose(vectors, reference_vectors(model, *vocabs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(export.load_user_encoder(paths.user_tower).encode(USERS[:1], HISTORIES[:1]),
                               vectors[:1], rtol=1e-6)
    assert encoder.encode([], []).shape == (0, 6)


def test_item_embeddings_parquet_schema_order_and_values(vocabs, exported):
    model, paths, _ = exported
    items, _ = vocabs
    schema = pq.read_schema(paths.item_embeddings)
    assert schema.field("item_id").type == pa.string()
    assert schema.field("embedding").type == pa.list_(pa.float32())
    ids, vectors = export.read_item_embeddings(paths.item_embeddings)
    assert list(ids) == list(items.ids[2:])
    np.testing.assert_allclose(vectors, model.item_tower(tf.range(2, items.size)).numpy(), rtol=1e-6)


def test_write_read_round_trip_and_errors(tmp_path):
    vectors = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    export.write_item_embeddings(tmp_path / "e.parquet", [f"x{i}" for i in range(5)], vectors)
    ids, back = export.read_item_embeddings(tmp_path / "e.parquet")
    assert list(ids) == [f"x{i}" for i in range(5)] and back.dtype == np.float32
    np.testing.assert_array_equal(back, vectors)
    with pytest.raises(InputError):
        export.write_item_embeddings(tmp_path / "f.parquet", ["a"], vectors)
    with pytest.raises(InputError):
        export.read_item_embeddings(tmp_path / "missing.parquet")


def test_mean_pooling_encoder_averages_known_history_items(tmp_path):
    ids = np.array(["a", "b", "c"], dtype=object)
    vectors = np.array([[1, 0], [0, 2], [4, 4]], np.float32)
    export.export_mean_pooling_encoder(ids, vectors, tmp_path / "user_tower", max_history=2)
    encoder = export.load_user_encoder(tmp_path / "user_tower")
    out = encoder.encode(["any", "x", "y"], [["a", "zzz", "b"], [], ["c", "a", "b"]])
    # Row 0: "zzz" unknown -> ignored; max_history=2 keeps ["a", "zzz"] -> a. Row 2 keeps c, a.
    np.testing.assert_allclose(out, [[1, 0], [0, 0], [2.5, 2]])
    assert (encoder.dimension, encoder.max_history, encoder.metric) == (2, 2, "dot")
