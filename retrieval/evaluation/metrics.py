"""Top-k ranking metrics, per user, from a matrix of recommended item indices and CSR relevant sets.

Definitions follow RecBole (Zhao et al., "RecBole: Towards a Unified, Comprehensive and Efficient Framework for
Recommendation Algorithms", CIKM 2021, ``recbole/evaluator/metrics.py``). For one user with relevant set R (the test
items), ranked list L (best first, ``L_i`` at rank i = 1..k) and ``rel_i = [L_i in R]``:

- recall@k     = sum_{i<=k} rel_i / |R|
- precision@k  = sum_{i<=k} rel_i / k
- hit@k        = [sum_{i<=k} rel_i > 0]
- ndcg@k       = DCG@k / IDCG@k, DCG@k = sum_{i<=k} rel_i / log2(i + 1), IDCG@k = sum_{i<=min(|R|,k)} 1 / log2(i + 1)
- mrr@k        = 1 / (rank of the first relevant item) if it is within k, else 0
- map@k        = sum_{i<=k} rel_i * precision@i / min(|R|, k)

Beyond accuracy (popularity = number of training interactions of the item):

- avg_popularity@k = mean popularity of the user's top-k items
- tail_share@k     = share of the user's top-k items that lie in the tail: the head is the smallest set of most popular
  items that together make up ``head_share`` (default 80%) of training interactions; every other item is tail
- coverage@k       = |union of all users' top-k items| / catalogue size (global, not per user)

Each per-user metric is an array [U]; the reported number is its mean over users. Everything is computed from one
boolean hit matrix [U, K] (K = max k) and its cumulative sum, so every k costs one column slice. A slot holding -1
(fewer than K items could be ranked) is never a hit and is left out of the popularity means.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from retrieval.evaluation import csr as csr_lib

ACCURACY_METRICS = ("recall", "precision", "hit", "ndcg", "mrr", "map")
POPULARITY_METRICS = ("avg_popularity", "tail_share")


def hit_matrix(top_k: np.ndarray, relevant: csr_lib.Csr) -> np.ndarray:
    """``hits[u, i]`` = whether the item at rank i + 1 of user u is in u's relevant set. [U, K] bool."""
    return csr_lib.contains(relevant, np.arange(len(top_k)), top_k)


def _check(top_k: np.ndarray, ks: Sequence[int]) -> None:
    if top_k.ndim != 2:
        raise ValueError(f"top_k must be [U, K], got shape {top_k.shape}")
    if not ks or min(ks) < 1 or max(ks) > top_k.shape[1]:
        raise ValueError(f"every k must be in [1, {top_k.shape[1]}], got {list(ks)}")


def accuracy(top_k: np.ndarray, relevant: csr_lib.Csr, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """Per-user recall, precision, hit, NDCG, MRR and MAP at every k in ``ks``; keys like ``"recall@20"``.

    Every user must have at least one relevant item (the caller removes and counts the others).
    """
    _check(top_k, ks)
    n_relevant = relevant.lengths.astype(np.float64)
    if len(n_relevant) != len(top_k):
        raise ValueError(f"{len(top_k)} ranked lists but {len(n_relevant)} relevant sets")
    if np.any(n_relevant == 0):
        raise ValueError("every user needs at least one relevant item")
    hits = hit_matrix(top_k, relevant).astype(np.float64)
    big_k = hits.shape[1]
    ranks = np.arange(1, big_k + 1, dtype=np.float64)
    discount = 1.0 / np.log2(ranks + 1.0)
    ideal = np.concatenate([[0.0], np.cumsum(discount)])  # ideal[n] = IDCG of n relevant items at the top
    cum_hits = np.cumsum(hits, axis=1)
    cum_dcg = np.cumsum(hits * discount, axis=1)
    cum_ap = np.cumsum(hits * cum_hits / ranks, axis=1)  # sum of precision@i at the hits
    first_hit = np.where(hits.any(axis=1), hits.argmax(axis=1), big_k)  # 0-based rank of the first hit
    out = {}
    for k in ks:
        n_hits = cum_hits[:, k - 1]
        capped = np.minimum(n_relevant, k)
        out[f"recall@{k}"] = n_hits / n_relevant
        out[f"precision@{k}"] = n_hits / k
        out[f"hit@{k}"] = (n_hits > 0).astype(np.float64)
        out[f"ndcg@{k}"] = cum_dcg[:, k - 1] / ideal[capped.astype(np.int64)]
        out[f"mrr@{k}"] = np.where(first_hit < k, 1.0 / (first_hit + 1.0), 0.0)
        out[f"map@{k}"] = cum_ap[:, k - 1] / capped
    return out


def tail_mask(popularity: np.ndarray, head_share: float = 0.8) -> np.ndarray:
    """Boolean [V]: True for tail items, i.e. outside the smallest most-popular set holding ``head_share`` of counts.

    Ties in popularity are broken by item index (stable sort), so the head is deterministic.
    """
    if not 0.0 < head_share <= 1.0:
        raise ValueError(f"head_share must be in (0, 1], got {head_share}")
    popularity = np.asarray(popularity, dtype=np.float64)
    order = np.argsort(-popularity, kind="stable")
    cumulative = np.cumsum(popularity[order])
    n_head = int(np.searchsorted(cumulative, head_share * cumulative[-1] * (1 - 1e-12))) + 1 if len(order) else 0
    tail = np.ones(len(popularity), dtype=bool)
    tail[order[:n_head]] = False
    tail[popularity == 0] = True
    return tail


def popularity_bias(top_k: np.ndarray, ks: Sequence[int], popularity: np.ndarray,
                    tail: np.ndarray) -> dict[str, np.ndarray]:
    """Per-user average popularity and tail share of the top-k items (keys ``avg_popularity@k``, ``tail_share@k``)."""
    _check(top_k, ks)
    valid = top_k >= 0
    safe = np.where(valid, top_k, 0)
    cum_valid = np.cumsum(valid, axis=1)
    cum_pop = np.cumsum(np.where(valid, np.asarray(popularity, np.float64)[safe], 0.0), axis=1)
    cum_tail = np.cumsum(valid & tail[safe], axis=1)
    out = {}
    for k in ks:
        n = np.maximum(cum_valid[:, k - 1], 1)
        out[f"avg_popularity@{k}"] = cum_pop[:, k - 1] / n
        out[f"tail_share@{k}"] = cum_tail[:, k - 1] / n
    return out


def coverage(top_k: np.ndarray, ks: Sequence[int], n_items: int) -> dict[str, float]:
    """Catalogue coverage: distinct items in all users' top-k over the ``n_items`` recommendable items."""
    _check(top_k, ks)
    out = {}
    for k in ks:
        items = top_k[:, :k]
        out[f"coverage@{k}"] = float(np.unique(items[items >= 0]).size) / n_items
    return out


def mean(per_user: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean over users of every per-user metric (NaN for an empty group)."""
    return {name: float(values.mean()) if values.size else float("nan") for name, values in per_user.items()}
