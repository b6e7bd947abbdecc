"""SimpleX's gated user-id embedding (Mao et al. 2021) against a direct NumPy computation of its formula."""

import numpy as np
import tensorflow as tf


def test_gated_user_id_is_added_after_the_mlp_and_unknown_users_keep_only_the_history():
    from retrieval.models.layers import Initializers
    from retrieval.models.part_settings import UserTowerSettings
    from retrieval.models.poolings.mean import MeanPooling
    from retrieval.models.towers import UserTower

    init = Initializers(0)
    history_table = tf.keras.layers.Embedding(10, 3, embeddings_initializer=init.embedding())
    settings = UserTowerSettings(4, hidden_units=(5,), user_id_embedding_dim=2, user_id_gate=0.25)
    tower = UserTower(history_table, settings, MeanPooling(), init, user_vocab_size=6)
    users = np.array([2, 5, 1], dtype=np.int32)  # 1 is the unknown-user index
    history = np.array([[2, 3, 0], [4, 0, 0], [5, 6, 7]], dtype=np.int32)
    got = tower({"user": users, "history": history}).numpy()
    table = history_table.embeddings.numpy()
    pooled = np.stack([table[h[h >= 2]].mean(axis=0) for h in history])
    ids = tower.user_id_embedding.embeddings.numpy()[users] * (users >= 2)[:, None]
    assert ids.shape == (3, 4)  # the gated id embedding has the output's width
    np.testing.assert_allclose(got, 0.25 * ids + 0.75 * tower.mlp(pooled).numpy(), rtol=1e-5, atol=1e-6)
