"""Export: the user-tower SavedModel in a fresh process, item embeddings Parquet, the mean-pooling encoder."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import gc
import json
import subprocess
import sys
from pathlib import Path

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


@pytest.fixture(scope="module", params=["mean", "self_attention"])
def exported(vocabs, tmp_path_factory, request):
    """An exported model; pooling "self_attention" (the causal encoder of configs/sequential.py) exports through
    the same ``serving_default(user_id, history)``."""
    items, users = vocabs
    config = default_config()
    config.embedding_dim, config.item_tower.id_embedding_dim, config.max_history = 6, 6, H
    config.user_tower.pooling = request.param
    config.user_tower.sequence.num_heads = 2
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
    assert fields == {"metric": "cosine", "max_history": H, "inference_part_size": 0, "dimension": 6,
                      "item_similarity": "vectors"}
    vectors = encoder.encode(USERS, HISTORIES)
    np.testing.assert_allclose(vectors, reference_vectors(model, *vocabs), rtol=1e-5, atol=1e-6)
    # One user alone against the same user in a batch of three: the same function on other shapes, so within a few
    # float32 ulps of the unit-norm vector (an absolute bound: a relative one fails on components near 0).
    np.testing.assert_allclose(export.load_user_encoder(paths.user_tower).encode(USERS[:1], HISTORIES[:1]),
                               vectors[:1], rtol=1e-6, atol=1e-6)
    assert encoder.encode([], []).shape == (0, 6)


def test_a_collected_encoder_destroys_its_lookup_tables_and_leaves_other_loads_working(exported):
    """``tf.saved_model.load`` leaves a model's ``StaticHashTable``s in the resource manager after the model is gone
    (a hot-reloading server grew by 0.45 MB per reload of the bundled run): the encoder destroys them with itself."""
    _, paths, _ = exported
    first, second = export.load_user_encoder(paths.root), export.load_user_encoder(paths.root)
    tables = export.resource_handles(first._loaded)
    assert len(tables) == 2  # the item and the user id tables
    assert all(int(tf.raw_ops.LookupTableSizeV2(table_handle=table)) > 0 for table in tables)
    expected = first.encode(USERS, HISTORIES)
    del first
    gc.collect()
    for table in tables:
        with pytest.raises(tf.errors.NotFoundError):
            tf.raw_ops.LookupTableSizeV2(table_handle=table)
    np.testing.assert_array_equal(second.encode(USERS, HISTORIES), expected)  # its own tables


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
    assert (encoder.dimension, encoder.max_history, encoder.metric) == (2, 2, "ip")


def test_item2vec_export_writes_word2vec_text_and_binary_that_gensim_loads(tmp_path):
    from gensim.models import KeyedVectors

    vocab = Vocabulary.from_ids(["b", "a", "b", "c", "ü", "c", "c"])
    vectors = np.random.default_rng(0).standard_normal([vocab.size, 5]).astype(np.float32)
    export.export_item2vec(vectors, vocab, tmp_path, max_history=3)
    for name, binary in ((export.WORD2VEC_TEXT, False), (export.WORD2VEC_BINARY, True)):
        loaded = KeyedVectors.load_word2vec_format(str(tmp_path / name), binary=binary)
        assert loaded.index_to_key == list(vocab.ids[2:])  # vocabulary order, non-ASCII ids as UTF-8
        np.testing.assert_array_equal(loaded.vectors, vectors[2:])  # repr() of a float32 round-trips exactly


def test_word2vec_refuses_ids_its_format_cannot_hold(tmp_path):
    with pytest.raises(InputError, match="whitespace") as raised:
        export.write_word2vec(tmp_path / "v.txt", ["a", "b c"], np.zeros([2, 3], np.float32), binary=False)
    assert raised.value.row == 1 and not (tmp_path / "v.txt").exists()


def test_tf_serving_dir_numbered_versions_load_through_the_serving_signature(vocabs, exported, tmp_path):
    model, paths, _ = exported
    items, users = vocabs
    (paths.root / "manifest.json").write_text(json.dumps({"run_id": "r7", "version": "r7"}))
    first = export.tf_serving_dir(paths.root, tmp_path / "models", "towers")
    second = export.tf_serving_dir(paths.root, tmp_path / "models", "towers")
    assert (first, second) == (tmp_path / "models" / "towers" / "1", tmp_path / "models" / "towers" / "2")
    assert sorted(p.name for p in (tmp_path / "models" / "towers").iterdir()) == ["1", "2"]  # no staging left
    assert json.loads((second / "assets.extra" / "run.json").read_text())["run_id"] == "r7"
    serve = tf.saved_model.load(str(second)).signatures["serving_default"]  # as TF Serving calls it
    padded = export.pad_histories(HISTORIES, H)
    got = serve(user_id=tf.constant(USERS), history=tf.constant(padded.astype(str)))["embedding"].numpy()
    np.testing.assert_allclose(got, reference_vectors(model, items, users), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="exists"):
        export.tf_serving_dir(paths.root, tmp_path / "models", "towers", version=2)
    with pytest.raises(InputError, match="run directory"):
        export.tf_serving_dir(tmp_path, tmp_path / "models", "towers")


def test_export_command_writes_the_latest_run_under_its_version(exported, tmp_path):
    _, paths, _ = exported
    (paths.root / "manifest.json").write_text(json.dumps({"run_id": "r7", "version": "r7", "status": "published"}))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "r7").symlink_to(paths.root, target_is_directory=True)
    (model_dir / "latest").symlink_to("r7")
    command = [sys.executable, "-m", "pipelines.export", f"--run_dir={model_dir}", f"--base_dir={tmp_path / 'tfs'}",
               "--name=towers", "--version=5"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "tfs" / "towers" / "5" / "saved_model.pb").is_file()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr.strip().splitlines()[-1]


def _export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.export", *args], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])


@pytest.mark.parametrize("status", ["rejected", "running", None])
def test_export_command_refuses_a_run_that_was_not_published(tmp_path, status):
    run = tmp_path / "model" / "r1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", **({"status": status} if status else {})}))
    done = _export(f"--run_dir={run}", f"--base_dir={tmp_path / 'tfs'}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: field 'run_dir': run r1 was not published (status {status!r}); export only what the gate passed, "
        f"or pass --allow_unpublished"]
    assert not (tmp_path / "tfs").exists()


@pytest.mark.parametrize("flag,message", [
    ("--base_dir=/proc/models", "field 'base_dir': /proc/models is on /proc"),
    ("--base_dir={file}", "is a file; expected a directory"),
    ("--name=" + "n" * 300, "field 'name': 'nnnn"),
    ("--name=../up", "field 'name': '../up' is not a valid name"),
    ("--version=9223372036854775808", "flag --version=9223372036854775808"),
    ("--version=-1", "flag --version=-1"),
])
def test_export_command_refuses_bad_flags_in_one_line(tmp_path, flag, message):
    run = tmp_path / "r1"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "status": "published"}))
    (tmp_path / "file").write_text("x")
    args = [f"--run_dir={run}", f"--base_dir={tmp_path / 'tfs'}", flag.format(file=tmp_path / "file")]
    done = _export(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and len(lines[0]) < 400, lines
