"""A damaged newest checkpoint: restore falls back to the previous intact one (helper, two-tower fit, Item2Vec)."""

import retrieval  # noqa: F401, I001  (first: sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from retrieval import checkpoints, training
from retrieval.errors import InputError
from retrieval.models import build_model, item2vec
from tests.models.test_item2vec import _config as item2vec_config
from tests.models.test_item2vec import _planted
from tests.test_training import data, model_config, train_config  # noqa: F401  (data is a fixture)


def corrupt(prefix: str) -> None:
    """Flips bytes in the middle of the checkpoint's data shard (its checksum no longer matches)."""
    shard = next(Path(prefix).parent.glob(Path(prefix).name + ".data-*"))
    content = bytearray(shard.read_bytes())
    middle = len(content) // 2
    content[middle:middle + 16] = bytes(b ^ 0xFF for b in content[middle:middle + 16])
    shard.write_bytes(bytes(content))


def saved_values(directory: Path, count: int):
    """A checkpoint manager with ``count`` checkpoints of one variable holding 1.0, 2.0, ... ."""
    variable = tf.Variable(tf.zeros([256]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), str(directory), max_to_keep=5)
    for value in range(1, count + 1):
        variable.assign(tf.fill([256], float(value)))
        manager.save()
    fresh = tf.Variable(tf.zeros([256]))
    checkpoint = tf.train.Checkpoint(v=fresh)
    return fresh, checkpoint, tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=5)


def test_restore_skips_a_corrupted_newest_checkpoint_and_logs_it(tmp_path):
    variable, checkpoint, manager = saved_values(tmp_path, 3)
    corrupt(manager.checkpoints[-1])
    with mock.patch.object(checkpoints.logging, "warning") as warning:
        assert checkpoints.restore_newest_intact(checkpoint, manager).endswith("ckpt-2")
    assert "ckpt-3" in warning.call_args_list[0].args[1]
    np.testing.assert_array_equal(variable.numpy(), 2.0)


def test_restore_with_no_checkpoint_returns_none_and_with_none_intact_raises(tmp_path):
    _, checkpoint, manager = saved_values(tmp_path / "empty", 0)
    assert checkpoints.restore_newest_intact(checkpoint, manager) is None
    _, checkpoint, manager = saved_values(tmp_path / "broken", 2)
    for prefix in manager.checkpoints:
        corrupt(prefix)
    with pytest.raises(InputError, match="no checkpoint loads.*--force"):
        checkpoints.restore_newest_intact(checkpoint, manager)


def test_fit_resumes_from_the_previous_checkpoint_when_the_last_is_corrupted(data, tmp_path):  # noqa: F811
    items, users, examples = data
    first = build_model(model_config(), items, users)
    assert training.fit(first, examples, train_config(), checkpoint_dir=tmp_path).step == 18  # ckpts 12, 16, 18
    corrupt(str(tmp_path / "ckpt-18"))
    rerun = build_model(model_config(), items, users)
    with mock.patch.object(checkpoints.logging, "warning") as warning:
        result = training.fit(rerun, examples, train_config(), checkpoint_dir=tmp_path)
    assert "ckpt-18" in warning.call_args_list[0].args[1]
    assert result.step == 18 and result.history  # trained steps 17 and 18 again, from ckpt-16
    for a, b in zip(first.trainable_variables, rerun.trainable_variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert tf.train.latest_checkpoint(tmp_path).endswith("ckpt-18")
    assert training.fit(build_model(model_config(), items, users), examples, train_config(),
                        checkpoint_dir=tmp_path).history == {}  # the rewritten ckpt-18 loads


def test_item2vec_resumes_from_the_previous_checkpoint_when_the_last_is_corrupted(tmp_path):
    users, items, times, vocab = _planted(num_users=60)
    config = item2vec_config(epochs=2)
    straight = item2vec.train_item2vec(config, users, items, times, vocab, checkpoint_dir=tmp_path)
    newest = tf.train.latest_checkpoint(tmp_path)
    corrupt(newest)
    with mock.patch.object(checkpoints.logging, "warning") as warning:
        resumed = item2vec.train_item2vec(config, users, items, times, vocab, checkpoint_dir=tmp_path)
    assert Path(newest).name in warning.call_args_list[0].args[1]
    np.testing.assert_array_equal(resumed, straight)  # the last epoch was trained again, identically
