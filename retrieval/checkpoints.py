"""Checkpoint restore that survives a damaged checkpoint: the newest one that loads wins.

A process killed while writing, a full disk or a bad sector can leave the newest checkpoint of a run unreadable
(a truncated or corrupted data shard fails its checksum). Training must then resume from the previous intact
checkpoint instead of failing on every rerun of the run id; each skipped checkpoint is logged with its error.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
from absl import logging

import retrieval  # noqa: F401  (contract; the package __init__ already ran and set TF_USE_LEGACY_KERAS)
from retrieval.errors import InputError


def restore_newest_intact(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager) -> Optional[str]:
    """Restores the newest checkpoint of ``manager`` that loads completely into ``checkpoint``'s objects.

    The objects' variables must already exist (restores are then immediate, not deferred). A checkpoint that fails to
    load (any error: checksum, truncation, missing shard, objects not matched) is skipped with a warning; a later
    successful restore overwrites every variable, so a partial failed restore leaves nothing behind.

    Returns:
      The path of the restored checkpoint, or None when ``manager`` has no checkpoint.

    Raises:
      InputError: checkpoints exist but none of them loads (the run id cannot be resumed; rerun with ``--force``).
    """
    failures = []
    for path in reversed(manager.checkpoints):
        try:
            checkpoint.restore(path).assert_existing_objects_matched()
        except Exception as e:  # whatever the damage, this checkpoint is unusable
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            logging.warning("skipping checkpoint %s, it does not load (%s); trying the previous one", path, reason)
            failures.append(f"{path} ({reason})")
            continue
        if failures:
            logging.warning("resumed from the older checkpoint %s after skipping %d damaged one(s)", path,
                            len(failures))
        return path
    if failures:
        raise InputError(f"no checkpoint loads: {'; '.join(failures)}; rerun with --force or a new run id",
                         path=str(manager.directory))
    return None
