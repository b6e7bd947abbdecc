"""The exported item tower of a test model, called as a catalogue refresh calls it."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import numpy as np
import tensorflow as tf

from retrieval import export


def embed_with_exported_item_tower(model, vocab, item_features, path, ids=None, rows=slice(2, None)) -> np.ndarray:
    """Exports ``model``'s item tower to ``path`` and embeds ``ids`` (default: the vocabulary's items) with the
    coded features ``item_features[name][rows]``, through the SavedModel's ``serving_default``."""
    export.export_item_tower(model, vocab, path)
    loaded = tf.saved_model.load(str(path))
    names = [n.decode() for n in loaded.feature_names.numpy()]
    inputs = {f"feature_{i}": tf.constant(item_features[name][rows]) for i, name in enumerate(names)}
    ids = vocab.ids[2:].astype(str) if ids is None else ids
    return loaded.signatures["serving_default"](item_id=tf.constant(ids), **inputs)["embedding"].numpy()
