"""Evaluation of cold catalogue items: test pairs whose item had no training interactions, reported apart.

The headline (and the gate) rank warm items only, as before a catalogue existed. Test pairs with a cold item
(``retrieval.data.catalogue``: a catalogue item nobody clicked in training) are ranked here for the users who have a
training history, in two ways:

- ``cold_items/<metric>@k``: in the whole catalogue (warm and cold items, training items excluded): does a cold item
  reach the top k against everything else a user could be shown;
- ``cold_items/among_cold/<metric>@k``: among the cold items only: which of the new items suits the user, the
  question of a "new arrivals" shelf.

Beside the model, in the same run on the same users, the content baseline (``content/``): each item is the TF-IDF
vector of its coded features (``retrieval.data.content``), the user is the mean of her training items' vectors, and
the score is their cosine (the classic content-based profile, Lops et al. 2011, "Content-based recommender
systems", section 3.1). ``paired/content/...`` is the model minus the baseline per user, with a 95% bootstrap
interval and a sign-flip p-value (``bootstrap.paired_comparison``). Written by hand: none of the dependencies scores
a user profile against item feature vectors.

Intervals and paired tests need :data:`MIN_INTERVAL_USERS` users with a cold test pair: below that (a catalogue
with a handful of new items, 3 pairs) a bootstrap over users spans most of [0, 1] and says nothing, so only the
means are given, and the report says why (``protocol/cold_items/min_interval_users``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import scipy.sparse as sp

from retrieval.data import content as content_lib
from retrieval.data.vocab import NUM_RESERVED
from retrieval.evaluation import bootstrap, evaluator, ranking
from retrieval.evaluation import csr as csr_lib
from retrieval.evaluation import metrics as metrics_lib
from retrieval.settings import CI_METRICS

PREFIX = "cold_items/"
# Users (the bootstrap's unit) below which no interval is computed: the usual rule of thumb for a mean's sampling
# distribution to be near normal; with 3 users of recall 0 or 1 the interval is [0, 1] whatever the model.
MIN_INTERVAL_USERS = 30


def content_scorer(items: sp.csr_matrix, train: csr_lib.Csr, columns: np.ndarray) -> ranking.Scorer:
    """Cosine of each user's profile (the mean of her training items' content vectors) with the content vectors of
    the catalogue indices ``columns`` (in that order; rows 0 and 1 score -inf: padding and OOV)."""
    items = content_lib.normalize_rows(sp.csr_matrix(items))
    rows, cols = csr_lib.to_pairs(train)
    incidence = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(train.n_rows, items.shape[0]))
    profiles = content_lib.normalize_rows(incidence @ items)
    candidates = items[columns].T.tocsc()

    def score(user_rows: np.ndarray) -> np.ndarray:
        scores = np.asarray((profiles[user_rows] @ candidates).todense(), dtype=np.float32)
        scores[:, columns < NUM_RESERVED] = -np.inf
        return scores
    return score


def _per_user(scorer: ranking.Scorer, rows: np.ndarray, relevant: csr_lib.Csr, exclude: Optional[csr_lib.Csr],
              n_items: int, ks: Sequence[int]) -> dict[str, np.ndarray]:
    top, _ = ranking.top_k(scorer, rows, n_items, max(ks), exclude)
    return metrics_lib.accuracy(top, csr_lib.take(relevant, rows), ks)


def _columns(csr: csr_lib.Csr, columns: np.ndarray, renumber: bool) -> csr_lib.Csr:
    """``csr`` keeping only the given columns: as they are, or (``renumber``) as their positions in ``columns``."""
    rows, cols = csr_lib.to_pairs(csr)
    position = np.full(max(int(columns.max(initial=0)), int(cols.max(initial=0))) + 1, -1, np.int64)
    position[columns] = np.arange(len(columns))
    kept = position[cols] >= 0
    return csr_lib.from_pairs(rows[kept], position[cols[kept]] if renumber else cols[kept], csr.n_rows)


def _summary(prefix: str, per_user: dict[str, np.ndarray], ks: Sequence[int], n_bootstrap: int,
             seed: int) -> dict[str, float]:
    out = {prefix + name: value for name, value in metrics_lib.mean(per_user).items()}
    if n_bootstrap:
        headline = {f"{m}@{k}": per_user[f"{m}@{k}"] for m in CI_METRICS for k in ks}
        for name, (low, high) in bootstrap.bootstrap_ci(headline, n_bootstrap, seed).items():
            out[f"{prefix}{name}_ci_low"], out[f"{prefix}{name}_ci_high"] = low, high
    return out


def evaluate(user_vectors: np.ndarray, item_vectors: np.ndarray, warm: np.ndarray, train: csr_lib.Csr,
             test: csr_lib.Csr, content: Optional[sp.csr_matrix], ks: Sequence[int], *, exclude_train: bool = True,
             n_bootstrap: int = 1000, seed: int = 0,
             progress_interval_s: float = evaluator.PROGRESS_INTERVAL_S) -> dict:
    """Metrics of the test pairs with cold items (see the module docstring), keys under ``cold_items/``.

    Args:
      user_vectors: [U, d] aligned with the rows of ``train``/``test`` (normalised for cosine).
      item_vectors: [V, d] by catalogue index (normalised for cosine).
      warm: [V] bool, which indices had training interactions (rows 0 and 1 are never ranked either way).
      train, test: [U, V] interactions by catalogue index.
      content: [V, terms] content vectors (``retrieval.data.content``), or None for no content baseline.
      n_bootstrap: resamples for intervals and paired tests (0, or fewer than :data:`MIN_INTERVAL_USERS` users:
        none).
      progress_interval_s: seconds between progress lines (users ranked of the total, rate, ETA) while ranking.
    """
    ks = sorted({int(k) for k in ks})
    cold = np.flatnonzero(~np.asarray(warm, bool))
    cold = cold[cold >= NUM_RESERVED]
    relevant = _columns(test, cold, renumber=False)
    users = np.flatnonzero((relevant.lengths > 0) & (train.lengths > 0))
    out = {f"count/{PREFIX}items": int(len(cold)), f"count/{PREFIX}test_pairs": int(relevant.indices.size),
           f"count/{PREFIX}eval_users": int(len(users))}
    if not len(users):
        return out
    out[f"protocol/{PREFIX}min_interval_users"] = MIN_INTERVAL_USERS
    if len(users) < MIN_INTERVAL_USERS:
        n_bootstrap = 0  # means only (module docstring)
    among = np.concatenate([np.arange(NUM_RESERVED), cold])  # column j of the among-cold ranking is index among[j]
    spaces = {  # prefix: (columns ranked, relevant pairs in that space, excluded pairs)
        "": (np.arange(len(warm)), relevant, train if exclude_train else None),
        "among_cold/": (among, _columns(test, among, renumber=True), None),  # no cold item is a training item
    }
    progress = evaluator.Progress(len(users) * len(spaces) * (1 if content is None else 2), progress_interval_s)
    for space, (columns, relevant_here, exclude) in spaces.items():
        where = space.rstrip("/") or "whole catalogue"
        model = _per_user(progress.counting(ranking.dot_scorer(user_vectors, item_vectors[columns]),
                                            f"cold items, model, {where}"), users, relevant_here, exclude,
                          len(columns), ks)
        out.update(_summary(PREFIX + space, model, ks, n_bootstrap, seed))
        if content is None:
            continue
        baseline = _per_user(progress.counting(content_scorer(content, train, columns),
                                               f"cold items, content, {where}"), users, relevant_here, exclude,
                             len(columns), ks)
        out.update(_summary(f"{PREFIX}{space}content/", baseline, ks, n_bootstrap, seed))
        if n_bootstrap:
            headline = [f"{m}@{k}" for m in CI_METRICS for k in ks]
            paired = bootstrap.paired_comparison({n: model[n] for n in headline}, {n: baseline[n] for n in headline},
                                                 n_bootstrap, seed)
            for name, stats in paired.items():
                out.update({f"{PREFIX}{space}paired/content/{name}_{bootstrap.PAIRED_KEYS[field]}": value
                            for field, value in stats.items()})
    return out
