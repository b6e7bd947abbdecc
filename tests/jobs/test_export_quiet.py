"""The export stage of a catalogue run says nothing of TensorFlow's saver: no TF-Keras serialization warning for the
layers called only through a method (the content profile, a dropout), no temporary paths (``retrieval.quiet``)."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import logging
import os

import numpy as np
import tensorflow as tf

from retrieval import export, quiet
from retrieval.data.vocab import Vocabulary
from tests.models.test_content_profile import model_of


def test_a_catalogue_export_logs_no_saver_chatter(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    vocab = Vocabulary.from_ids([f"i{k}" for k in rng.integers(0, 10, 500)]).with_catalogue(["c0", "c1"])
    genres = rng.integers(0, 6, (vocab.size, 3)).astype(np.int32)
    genres[:2] = 0
    model = model_of(vocab, {"genres": genres}, weight=0.3)
    model.user_vectors(tf.constant([2, 3]), tf.constant([[3, 5], [4, 12]]))
    model.item_tower(tf.constant([3, 12]))  # built, as after training
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    root, level, filtered = logging.getLogger(), logging.getLogger().level, os.environ.get(quiet.QUIET_ENV) == "1"
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        monkeypatch.setenv(quiet.QUIET_ENV, "1")
        quiet.install()
        export.export_item_tower(model, vocab, tmp_path / "item_tower")
        export.export_user_tower(model, vocab, Vocabulary.from_ids(["u0", "u1"]), tmp_path / "user_tower")
        assert (tmp_path / "item_tower" / "saved_model.pb").exists()
        assert [r.getMessage() for r in records if r.name in ("tensorflow", "absl")] == []
        quiet.verbose()  # --verbosity=1 shows them again
        export.export_item_tower(model, vocab, tmp_path / "again")
        assert any("Skipping full serialization of TF-Keras layer" in r.getMessage() for r in records)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        quiet._set_log_filters(filtered)
