"""An item-item teacher for the two towers (``train.teacher_items``): each user's top items under an item-item
baseline (``train.teacher``, RP3beta by default), fitted on the phase's own training pairs, become extra targets of
the set examples (``SetExamples.with_teacher``).

Where item-item structure is strong (Gowalla's check-ins), a one-minute item-item walk (RP3beta, Paudel et al. 2017)
ranks a user's held-out items better than the towers, and the two are complementary (their standardised scores
summed beat either on the automatic holdout: benchmarks/JOURNAL.md, "Issue 47"). The towers stay one inner product
per pair, so the teacher's knowledge has to enter through training: its top ``n`` unseen items per user are
targets beside the clicks (distillation with hard targets, Hinton et al. 2015; the teacher's list as extra positives,
as in ranking distillation, Tang and Wang 2018). The teacher is any of the report's baselines named in
``settings.TEACHERS`` (``retrieval.evaluation.baselines.BASELINES``: a scorer of every item for a user from her
items), with the parameters the run tuned for its report on the automatic holdout (``retrieval.evaluation.runs.
tuned_params``: one tuning for the teacher and the report), and it is fitted on the same training pairs as the phase
(the tuning part while tuning), so the holdout only chooses its parameters, as it chooses the towers' epochs. Written
by hand: none of the dependencies distils a model into another's training data.
"""

from __future__ import annotations

import time
from typing import Mapping

import numpy as np
from absl import logging

from retrieval.data.vocab import NUM_RESERVED
from retrieval.evaluation import baselines, ranking
from retrieval.evaluation import csr as csr_lib


def pairs(name: str, users: np.ndarray, items: np.ndarray, n_users: int, n_items: int, per_user: int,
          params: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher pairs ``(users, items, sureness)``: for every user of the training pairs ``(users, items)``
    (vocabulary indices), the ``per_user`` best items under baseline ``name`` (``settings.TEACHERS``) with ``params``
    that are not among her training items and that the teacher scores above zero; ``sureness`` is each pair's score
    over the user's best teacher score (1 for her first teacher item), for ``train.teacher_weighting = "score"``."""
    start = time.monotonic()
    users, items = np.asarray(users, np.int64), np.asarray(items, np.int64)
    train = csr_lib.from_pairs(users, items, n_users)
    scorer = baselines.make(name, train, n_items, np.bincount(items, minlength=n_items), params=params)
    rows = np.flatnonzero(train.lengths > 0)
    top, scores = ranking.top_k(scorer, rows, n_items, per_user, exclude=train)
    keep = (top >= NUM_RESERVED) & (scores > 0)
    out_users, out_items = np.repeat(rows, per_user)[keep.ravel()], top[keep]
    sureness = (scores / np.maximum(scores[:, :1], np.finfo(np.float32).tiny))[keep].astype(np.float32)
    logging.info("teacher: %d pairs from %s (%s), %d per user, in %.0f s", len(out_items), name,
                 ", ".join(f"{key} {value:g}" for key, value in params.items()), per_user, time.monotonic() - start)
    return out_users, out_items, sureness
