"""Evaluation of one model against baselines on the same users: ranking, metrics, intervals, paired tests, counts.

:func:`evaluate` works on index arrays (user vectors, item vectors, train/test CSR); ``runs.evaluate_run`` feeds it
from a run directory. Users are rows of ``train``/``test`` (every user of either). A user is evaluated when she has
at least one *rankable* test item: a catalogue item that, with ``exclude_train``, is not already among her training
items (those can never be recommended, so they are removed from her relevant set and counted). Evaluated users with
training history form the headline group; those without (cold start) are reported separately under
``cold_start/``; users left with no rankable test item are counted. Output keys (flat, for ``metrics.json``):

- ``recall@20``, ``ndcg@20``, ... model, users with history; ``recall@20_ci_low`` / ``_ci_high`` bootstrap 95%
- ``cold_start/recall@20``: model, users without training history
- ``baseline/<name>/recall@20`` (and ``baseline/<name>/cold_start/...``); ``baseline/<name>/params/<p>``: the
  parameters it was fitted with (``baselines.params_of``), ``baseline/<name>/fit_seconds``: the time its fit took
- ``<name>/recall@20``: another system passed in ``others`` (e.g. a previous run), same users and catalogue
- ``paired/<name>/recall@20_diff`` (model minus system ``name``, per user, averaged) with ``recall@20_diff_ci_low``,
  ``recall@20_diff_ci_high`` and the paired ``recall@20_p_value``
- ``ann/recall@20`` (model through the approximate index) and ``ann/recall_vs_exact@20`` (share of the exact top-k
  the index finds)
- ``count/...`` and ``protocol/...``
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np
from absl import logging

from retrieval.data.vocab import NUM_RESERVED
from retrieval.evaluation import baselines as baselines_lib
from retrieval.evaluation import bootstrap, ranking
from retrieval.evaluation import csr as csr_lib
from retrieval.evaluation import metrics as metrics_lib
from retrieval.settings import CI_METRICS, DEFAULT_KS

# Seconds between progress lines: 25, so that with the few seconds between the line before a block and the block's
# start (and a loaded box's late wake-ups) the log never goes 30 s without a line (a beat at 30 s landed 32-34 s after
# the line before it).
PROGRESS_INTERVAL_S = 25.0
MIN_HEARTBEAT_S = 1.0  # a heartbeat's shortest interval, whatever progress_interval_s asks (0: every block)


class Progress:
    """Counts the users ranked over every system and logs, at most every ``interval_s`` seconds, how many of the
    ``total`` are done, the rate and the time left: a large evaluation (minutes, several systems) is otherwise
    silent from its first line to its last."""

    def __init__(self, total: int, interval_s: float = PROGRESS_INTERVAL_S, clock=time.monotonic):
        self.total, self.interval_s, self._clock = total, interval_s, clock
        self.done = 0
        self._start = self._last = clock()

    def counting(self, scorer: ranking.Scorer, tag: str) -> ranking.Scorer:
        """``scorer``, counting the rows of every block it scores (a progress line when one is due)."""
        def scored(rows: np.ndarray):
            scores = scorer(rows)
            self.advance(len(rows), tag)
            return scores
        return scored

    def advance(self, users: int, tag: str) -> None:
        self.done += users
        now = self._clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        rate = self.done / max(now - self._start, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        logging.info("evaluation: %d of %d user rankings done (%.0f%%, now %s), %.0f users/s, about %.0f s left",
                     self.done, self.total, 100.0 * self.done / max(self.total, 1), tag, rate, eta)


class Heartbeat:
    """What a running :func:`heartbeat` block is doing (``what``: its next lines say this)."""

    def __init__(self, what: str):
        self.what = what


@contextlib.contextmanager
def heartbeat(what: str, interval_s: float = PROGRESS_INTERVAL_S) -> Iterator[Heartbeat]:
    """Logs ``evaluation: <what>, <n> s so far`` every ``interval_s`` seconds (:data:`MIN_HEARTBEAT_S` at least)
    while the block runs, and its time when it ends if it ran that long (a short block logs nothing): a baseline's
    fit (EASE^R's inverse at 14k items: a minute in one BLAS call, which releases the GIL) returns to Python only
    when it is done, so no counter inside it can say that it is still going. The block may update the yielded
    :class:`Heartbeat`'s ``what`` as it moves on (a baseline's tuning, fit after fit: short fits in a row are no
    longer silent together); the closing line names the block as it began."""
    start, done = time.monotonic(), threading.Event()
    state, beats = Heartbeat(what), []

    def beat() -> None:
        while not done.wait(max(interval_s, MIN_HEARTBEAT_S)):
            beats.append(time.monotonic() - start)
            logging.info("evaluation: %s, %.0f s so far", state.what, beats[-1])

    beating = threading.Thread(target=beat, name="evaluation-heartbeat", daemon=True)
    beating.start()
    try:
        yield state
    finally:
        done.set()
        beating.join()
        if beats:
            logging.info("evaluation: %s took %.1f s", what, time.monotonic() - start)


def rankable(train: csr_lib.Csr, test: csr_lib.Csr, exclude_train: bool) -> tuple[csr_lib.Csr, int]:
    """Test pairs that can be recommended, and how many were removed for being training items of the user."""
    if not exclude_train:
        return test, 0
    rows, cols = csr_lib.to_pairs(test)
    seen = csr_lib.contains(train, rows, cols[:, None])[:, 0]
    return csr_lib.from_pairs(rows[~seen], cols[~seen], test.n_rows), int(seen.sum())


class _Scoring:
    """Ranks one system for one group of users and keeps its per-user metrics."""

    def __init__(self, scorer: ranking.Scorer, rows: np.ndarray, relevant: csr_lib.Csr, exclude: Optional[csr_lib.Csr],
                 ks: Sequence[int], n_items: int, popularity: np.ndarray, tail: np.ndarray, max_block_bytes: int):
        self.top_k, _ = ranking.top_k(scorer, rows, n_items, max(ks), exclude, max_block_bytes=max_block_bytes)
        self.per_user = metrics_lib.accuracy(self.top_k, csr_lib.take(relevant, rows), ks)
        self.per_user.update(metrics_lib.popularity_bias(self.top_k, ks, popularity, tail))
        self.summary = metrics_lib.mean(self.per_user)
        self.summary.update(metrics_lib.coverage(self.top_k, ks, n_items - NUM_RESERVED))


def _headline(per_user: Mapping[str, np.ndarray], ks: Sequence[int]) -> dict[str, np.ndarray]:
    return {f"{m}@{k}": per_user[f"{m}@{k}"] for m in CI_METRICS for k in ks}


def _prefixed(prefix: str, values: Mapping[str, float]) -> dict[str, float]:
    return {prefix + name: value for name, value in values.items()}


def evaluate(user_vectors: np.ndarray, item_vectors: np.ndarray, train: csr_lib.Csr, test: csr_lib.Csr,
             ks: Sequence[int] = DEFAULT_KS, *, popularity: Optional[np.ndarray] = None, exclude_train: bool = True,
             baselines: Sequence[str] = baselines_lib.NAMES, others: Optional[Mapping[str, ranking.Scorer]] = None,
             n_bootstrap: int = 1000, seed: int = 0, ann_index=None, ann_index_offset: int = 0,
             head_share: float = 0.8, max_block_bytes: int = 256 << 20,
             baseline_defaults: Optional[Mapping[str, Mapping[str, float]]] = None,
             baseline_memory_mb: float = baselines_lib.BASELINE_MEMORY_MB,
             baseline_params: Optional[Mapping[str, Mapping[str, float]]] = None,
             progress_interval_s: float = PROGRESS_INTERVAL_S) -> dict:
    """Full-corpus evaluation of ``user_vectors @ item_vectors.T`` and the baselines; returns flat metrics.

    Args:
      user_vectors: [U, d] aligned with the rows of ``train``/``test`` (rows without test items are not scored).
      item_vectors: [V, d] aligned with vocabulary indices (rows 0 and 1, padding and OOV, are never recommended).
      train: [U, V] training items per user (excluded from rankings when ``exclude_train``; baselines fit on it).
      test: [U, V] relevant items per user.
      ks: cut-offs.
      popularity: [V] training interaction counts (default: users per item in ``train``).
      baselines: names from ``baselines.NAMES``, computed in the same run (a baseline that does not fit
        ``baseline_memory_mb``, EASE^R on a large catalogue, is skipped: logged, listed under
        ``protocol/skipped_baselines`` and its reason under ``protocol/skipped/<name>``).
      others: more systems (scorers) reported under ``<name>/`` and compared with the model, e.g. another run.
      n_bootstrap: resamples for intervals and paired tests (0: none).
      ann_index: optional index with ``.search(queries, k)``; item index = its id + ``ann_index_offset`` (see
        ``ranking.ann_top_k``).
      head_share: share of training interactions the popularity head holds (tail metrics).
      max_block_bytes: memory bound of one score block.
      baseline_defaults: the config's defaults per baseline name (``baselines.config_defaults``: EASE^R's lambda and
        items), unless ``baseline_params`` gives them.
      baseline_memory_mb: memory a baseline may take (``baselines.skip_reason``).
      baseline_params: parameters per baseline name (e.g. chosen by ``baseline_tuning``); the others: defaults.
      progress_interval_s: seconds between progress lines (users ranked, rate, ETA) while ranking.
    """
    ks = sorted({int(k) for k in ks})
    n_users, n_items = len(user_vectors), len(item_vectors)
    if train.n_rows != n_users or test.n_rows != n_users:
        raise ValueError(f"{n_users} user vectors but train/test have {train.n_rows}/{test.n_rows} rows")
    popularity = np.bincount(train.indices, minlength=n_items) if popularity is None else np.asarray(popularity)
    tail = metrics_lib.tail_mask(popularity, head_share)
    relevant, n_seen = rankable(train, test, exclude_train)
    has_test, has_train = relevant.lengths > 0, train.lengths > 0
    groups = {"": np.flatnonzero(has_test & has_train), "cold_start/": np.flatnonzero(has_test & ~has_train)}
    out = {
        "protocol/ranking": "full corpus, exact (blocked matmul + top-k)",
        "protocol/exclude_train": bool(exclude_train), "protocol/ks": list(ks),
        "protocol/baselines": list(baselines), "protocol/others": list(others or {}), "protocol/head_share": head_share,
        "protocol/bootstrap_resamples": int(n_bootstrap), "protocol/seed": int(seed),
        "count/users": int(n_users), "count/items": int(n_items - NUM_RESERVED),
        "count/train_pairs": int(train.indices.size), "count/test_pairs": int(test.indices.size),
        "count/test_pairs_seen_in_train": n_seen, "count/test_pairs_rankable": int(relevant.indices.size),
        "count/test_users_with_known_items": int((test.lengths > 0).sum()), "count/eval_users": len(groups[""]),
        "count/cold_start_users": len(groups["cold_start/"]),
        "count/test_users_without_rankable_items": int(((test.lengths > 0) & ~has_test).sum()),
        "count/tail_items": int(tail[NUM_RESERVED:].sum()),
    }
    exclude = train if exclude_train else None
    systems = [("", "model", ranking.dot_scorer(user_vectors, item_vectors))]
    points = {name: baselines_lib.params_of(name, (baseline_params or {}).get(name), baseline_defaults)
              for name in baselines}
    skipped = {name: baselines_lib.skip_reason(name, n_items, baseline_memory_mb, points[name]) for name in baselines}
    skipped = {name: reason for name, reason in skipped.items() if reason is not None}
    for name, reason in skipped.items():
        logging.warning("baseline %s skipped: %s", name, reason)
    out["protocol/skipped_baselines"] = list(skipped)
    out.update({f"protocol/skipped/{name}": reason for name, reason in skipped.items()})
    fitted = [name for name in baselines if name not in skipped]
    for number, name in enumerate(fitted, 1):
        params = points[name]
        start = time.monotonic()
        with heartbeat(f"fitting baseline {name} ({number} of {len(fitted)}) on {n_items - NUM_RESERVED:,} items and "
                       f"{train.indices.size:,} training pairs", progress_interval_s):
            scorer = baselines_lib.make(name, train, n_items, popularity, seed, params)
        systems.append((f"baseline/{name}/", name, scorer))
        out[f"baseline/{name}/fit_seconds"] = time.monotonic() - start
        modelled = getattr(scorer, "items", None)  # EASE^R on its most clicked items only (eval.ease_max_items)
        if modelled is not None:
            share = popularity[modelled].sum() / max(popularity[NUM_RESERVED:].sum(), 1)
            out[f"baseline/{name}/note"] = (f"models the {len(modelled):,} most clicked of {n_items - NUM_RESERVED:,} "
                                            f"items ({share:.0%} of the training pairs; eval.ease_max_items)")
            logging.info("baseline %s %s", name, out[f"baseline/{name}/note"])
        out.update({f"baseline/{name}/params/{param}": value for param, value in params.items()})
    systems += [(f"{name}/", name, scorer) for name, scorer in (others or {}).items()]
    progress = Progress(len(systems) * sum(len(rows) for rows in groups.values()), progress_interval_s)
    model = None
    for prefix, tag, scorer in systems:
        for group, rows in groups.items():
            if not len(rows):
                continue
            result = _Scoring(progress.counting(scorer, tag), rows, relevant, exclude, ks, n_items, popularity, tail,
                              max_block_bytes)
            out.update(_prefixed(prefix + group, result.summary))
            if n_bootstrap:
                for name, (low, high) in bootstrap.bootstrap_ci(_headline(result.per_user, ks), n_bootstrap,
                                                                seed).items():
                    out[f"{prefix}{group}{name}_ci_low"], out[f"{prefix}{group}{name}_ci_high"] = low, high
            if group:
                continue
            if model is None:
                model = result
            elif n_bootstrap:
                paired = bootstrap.paired_comparison(_headline(model.per_user, ks), _headline(result.per_user, ks),
                                                     n_bootstrap, seed)
                for name, stats in paired.items():
                    out.update({f"paired/{tag}/{name}_{bootstrap.PAIRED_KEYS[field]}": v for field, v in stats.items()})
        logging.info("evaluated %s: recall@%d = %.4f", tag, ks[-1], out.get(f"{prefix}recall@{ks[-1]}", float("nan")))
    if ann_index is not None and model is not None:
        out.update(_ann(ann_index, ann_index_offset, user_vectors, groups[""], relevant, exclude, ks, model.top_k))
    return out


def _ann(index, offset: int, user_vectors: np.ndarray, rows: np.ndarray, relevant: csr_lib.Csr,
         exclude: Optional[csr_lib.Csr], ks: Sequence[int], exact_top_k: np.ndarray) -> dict:
    """Model metrics through the approximate index, and its recall against the exact top-k."""
    excluded = csr_lib.take(exclude, rows) if exclude is not None else None
    approx, _ = ranking.ann_top_k(index, user_vectors[rows], max(ks), excluded, index_offset=offset)
    per_user = metrics_lib.accuracy(approx, csr_lib.take(relevant, rows), ks)
    out = _prefixed("ann/", metrics_lib.mean(per_user))
    out.update(_prefixed("ann/", metrics_lib.mean(ranking.overlap_at_k(approx, exact_top_k, ks))))
    return out
