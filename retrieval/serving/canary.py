"""Canary of a loaded run: real queries through its user tower and index before the server serves it.

Loading a run proves only that its files parse. A run whose user tower raises, returns vectors of another dimension
than the index or non-finite ones, or whose index holds vectors other than the run's item embeddings (random, NaN,
built from another run) loads fine and then fails or misleads every personalised request. So the canary asks the run
what the server will ask it, for a seeded sample of training users (their stored histories through the user tower),
and refuses it (``CanaryError``) unless:

* the item embeddings are finite and have the index's dimension;
* the user tower answers, with one finite vector per user, of the index's dimension;
* the index answers those queries with finite scores, and its recall@k against exact search over the run's item
  embeddings reaches ``recall_floor``. k is at most a tenth of the catalogue, so that an index of unrelated vectors
  cannot pass by chance (its expected recall is about k / N). The default floor, 0.9, sits below the build-time floor
  (0.95 at k = 100 on held-out users) to leave room for the noise of a small sample;
* the request path (``recommend_batch`` for the sample users and one cold-start request, ``similar``) answers with
  finite scores;
* what the tower says is right (:meth:`Canary.check_quality`): the run's held-out items (``data/test.parquet``) of up
  to ``quality_users`` check users, asked through the request path (stored history, seen items excluded), reach a
  recall@k of at least ``floor = max(quality_fraction * reference, 2 * k / catalogue) - 2 * se``. The reference is
  the run's own evaluated recall@k (``metrics.json``), else most-popular's on the same users; ``2 k / catalogue`` is
  twice what random vectors reach (so a tower of random finite vectors, or one from another run, is refused even
  where popularity is weak); ``se``, the standard error of the check users' mean recall, keeps sampling noise from
  refusing a good run. Runs without held-out data skip this check (reported as skipped), and so do catalogues of
  fewer than ``MIN_ITEMS_PER_K * k`` ranked items, where random answers already find a large share of the held-out
  items and no floor tells a working tower from a broken one (said as the reason it was skipped).

  A catalogue with items nobody clicked in training (cold items of an item table, the new items of a catalogue
  refresh, ``retrieval.jobs.refresh``) is checked on what a user tower can break: its answers are ranked among the
  catalogue's warm items (those with training interactions: the items ``metrics.json``'s recall ranked), by exact
  search for the queries the request path makes (stored history through the user tower, history excluded). Items
  without interactions, however many and however high they score, neither raise nor lower the check: a refresh
  that adds 10,000 items is measured like one that adds 10.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional, TypeVar

import numpy as np

from retrieval.artifacts import RunPaths, read_json
from retrieval.data import readers
from retrieval.errors import InputError
from retrieval.export import read_warm
from retrieval.index.factory import canonical_metric, prepare_vectors
from retrieval.index.run_index import user_queries
from retrieval.index.selfcheck import RecallProbe, exact_search
from retrieval.serving.generator import CandidateGenerator
from retrieval.serving.settings import CANARY_RECALL_FLOOR, CANARY_USERS

T = TypeVar("T")
MAX_ERROR_CHARS = 300
MIN_QUALITY_USERS = 10  # check users with held-out items below which the quality check is skipped (too noisy)
MIN_ITEMS_PER_K = 4  # ranked items per cut-off k below which the quality check is skipped (chance reaches k / items)
_TF_BOILERPLATE = ("Graph execution error", "Detected at node", "<stack traces", "[[")


class CanaryError(InputError):
    """The run failed its canary and is not served (at startup the server exits; on reload it keeps the old run)."""


def one_line(error: BaseException) -> str:
    """``Type: message`` on one line: the first informative line of ``error`` (TensorFlow's graph-execution preamble
    skipped), at most ``MAX_ERROR_CHARS`` characters. InputErrors are shown as their message alone."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    informative = [line for line in lines if not line.startswith(_TF_BOILERPLATE)] or lines or [""]
    text = informative[0] if isinstance(error, InputError) else f"{type(error).__name__}: {informative[0]}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def _attempt(what: str, call: Callable[[], T]) -> T:
    """``call()``, with any failure turned into a one-line ``CanaryError`` naming ``what`` failed."""
    try:
        return call()
    except Exception as e:  # a broken run may fail in any way (TensorFlow, FAISS, numpy): all mean "refuse it"
        raise CanaryError(f"{what} fails: {one_line(e)}") from None


@dataclasses.dataclass(frozen=True)
class Canary:
    """Canary settings; calling one on a loaded generator checks it (module docstring) and returns what it measured
    (``users``, ``k``, ``recall``, ``floor``, ``seconds``), or raises ``CanaryError``."""

    num_users: int = CANARY_USERS
    recall_floor: float = CANARY_RECALL_FLOOR
    max_k: int = 100
    seed: int = 0
    quality_users: int = 500
    quality_fraction: float = 0.5
    quality_k: int = 20  # the cut-off of the quality check, when the run's metrics.json reports it

    def __call__(self, generator: CandidateGenerator) -> dict:
        start = time.perf_counter()
        index, vectors = generator.index, generator.item_vectors
        if vectors.shape[1] != index.dimension:
            raise CanaryError(f"item_embeddings.parquet has dimension {vectors.shape[1]}, the index {index.dimension}")
        bad_items = int(np.sum(~np.isfinite(vectors).all(axis=1)))
        if bad_items:
            raise CanaryError(f"item_embeddings.parquet holds {bad_items} non-finite vectors")
        histories = generator.histories
        if not len(histories):
            raise CanaryError("data/train.parquet has no user with an item of the catalogue to run the canary on")
        queries = _attempt("the user tower", lambda: np.asarray(user_queries(
            generator.encoder, histories, generator.vocabulary, self.num_users, self.seed, generator.max_history)))
        users = min(self.num_users, len(histories))
        if queries.ndim != 2 or queries.shape != (users, index.dimension):
            raise CanaryError(f"the user tower returns shape {list(queries.shape)} for {users} users; the index "
                              f"expects [{users}, {index.dimension}]")
        bad_queries = int(np.sum(~np.isfinite(queries).all(axis=1)))
        if bad_queries:
            raise CanaryError(f"the user tower returns non-finite vectors for {bad_queries} of {users} sample users")
        k = max(1, min(self.max_k, len(index) // 10))
        found = _attempt("the index", lambda: index.search(queries, k))
        if not np.isfinite(found.scores[found.indices >= 0]).all():
            raise CanaryError("the index returns non-finite scores for the sample users")
        recall = RecallProbe(prepare_vectors(vectors, index.metric), index.id_map.indices,
                             prepare_vectors(queries, index.metric), k, index.metric)(index.index)
        if recall < self.recall_floor:
            raise CanaryError(f"the index reaches recall@{k} = {recall:.3f} against exact search over "
                              f"item_embeddings.parquet on {users} sample users, below the canary floor "
                              f"{self.recall_floor}; rebuild the run's index")
        self._check_requests(generator)
        quality = self.check_quality(generator)
        return {"users": users, "k": k, "recall": round(recall, 4), "floor": self.recall_floor, "quality": quality,
                "seconds": round(time.perf_counter() - start, 3)}

    def _check_requests(self, generator: CandidateGenerator) -> None:
        """The request path end to end: the sample users, a cold-start request and one similar-items request."""
        rows = generator.histories.sample(self.num_users, self.seed)
        user_ids = generator.histories.user_ids[rows].astype(str).tolist() + [None]
        k = min(10, len(generator.index))
        results = _attempt("a sample request", lambda: generator.recommend_batch(user_ids, k=k) + [
            generator.similar(str(generator.index.id_map.item_ids[0]), k)])
        if not all(result.fallback or np.isfinite(result.scores).all() for result in results):
            raise CanaryError("a sample request returns non-finite scores")

    def check_quality(self, generator: CandidateGenerator) -> dict:
        """Recall@k of the served answers on the run's held-out items (module docstring); returns ``users``, ``k``,
        ``recall``, ``reference`` (and where it comes from) and ``floor``, or ``skipped`` with the reason; raises
        ``CanaryError`` below the floor."""
        paths = RunPaths(generator.run_dir) if generator.run_dir is not None else None
        if paths is None or not paths.test_data.is_file():
            return {"skipped": "the run has no data/test.parquet"}
        warm = read_warm(paths.item_embeddings)
        ranked = None if warm.all() else np.flatnonzero(warm)  # positions of the warm items
        items = len(generator.index) if ranked is None else len(ranked)
        among = "catalogue items" if ranked is None else "warm catalogue items"
        evaluated = read_json(paths.metrics) if paths.metrics.is_file() else {}
        k = _cut_off(evaluated, self.quality_k, items)
        if items < MIN_ITEMS_PER_K * k:
            return {"skipped": f"{items} {among} are too few for a recall@{k} check: random answers would find "
                               f"about {k / max(items, 1):.0%} of the held-out items (at least {MIN_ITEMS_PER_K * k} "
                               "items needed)"}
        users, relevant = _held_out(generator, paths, self.quality_users, self.seed, ranked)
        if len(users) < MIN_QUALITY_USERS:
            return {"skipped": f"{len(users)} training users have held-out {among} (fewer than "
                               f"{MIN_QUALITY_USERS})"}
        if ranked is None:
            answers = [set(a.item_ids.tolist()) for a in _attempt(
                "a held-out request", lambda: generator.recommend_batch(list(users), k=k))]
        else:
            answers = _attempt("a held-out request", lambda: _ranked_answers(generator, users, ranked, k))
        recall = np.array([len(found & wanted) / len(wanted) for found, wanted in zip(answers, relevant, strict=True)])
        if isinstance(evaluated.get(f"recall@{k}"), (int, float)):
            reference, source = float(evaluated[f"recall@{k}"]), "the run's evaluated recall"
        else:
            reference, source = _popular_recall(generator, users, relevant, k), "most-popular on the same users"
        chance = 2.0 * k / items
        se = float(recall.std(ddof=1) / np.sqrt(len(recall)))
        floor = max(self.quality_fraction * reference, chance) - 2.0 * se
        measured = {"users": len(users), "k": k, "recall": round(float(recall.mean()), 4), "ranked_items": items,
                    "reference": round(reference, 4), "reference_source": source, "floor": round(floor, 4)}
        if recall.mean() < floor:
            raise CanaryError(
                f"the user tower's answers reach recall@{k} = {recall.mean():.4f} on the held-out items of "
                f"{len(users)} training users, below the canary floor {floor:.4f} (max of {self.quality_fraction:g} x "
                f"{source} {reference:.4f} and twice chance {chance:.4f}, less 2 standard errors; ranked among {items} "
                f"{among}): the user tower does not match this run's items")
        return measured


def _ranked_answers(generator: CandidateGenerator, users: list, ranked: np.ndarray, k: int) -> list[set]:
    """Each user's top ``k`` item ids among the catalogue positions ``ranked``: the request path's query (the stored
    history through the user tower), exact search over those items' vectors, the history excluded."""
    histories, id_map = generator.histories, generator.index.id_map
    stored = [histories.history(row) for row in histories.rows_of(users)]
    queries = generator.encoder.encode(list(users), [generator.vocabulary.ids_of(h[:generator.max_history]).tolist()
                                                     for h in stored])
    metric = canonical_metric(generator.index.metric)
    depth = min(len(ranked), k + max((len(h) for h in stored), default=0))
    _, found = exact_search(prepare_vectors(generator.item_vectors[ranked], metric), id_map.indices[ranked],
                            prepare_vectors(queries, metric), depth, metric)
    answers = []
    for row, history in zip(found, stored, strict=True):
        kept = row[(row >= 0) & ~np.isin(row, generator.in_catalogue(history))][:k]
        answers.append(set(id_map.ids_of(kept).tolist()))
    return answers


def _held_out(generator: CandidateGenerator, paths: RunPaths, count: int, seed: int,
              ranked: Optional[np.ndarray] = None) -> tuple[list, list]:
    """Up to ``count`` training users (a seeded sample) with held-out catalogue items (of the positions ``ranked``
    when given) they have not trained on, and those items (sets of ids); only the sampled users' test rows are
    read."""
    histories = generator.histories
    rows = histories.sample(4 * count, seed)
    test = readers.read_run_interactions(paths.test_data, histories.user_ids[rows].astype(str).tolist())
    by_user = test.groupby("user_id")["item_id"].agg(set).to_dict() if len(test) else {}
    catalogue = generator.index.id_map
    allowed = None if ranked is None else set(catalogue.ids_of(catalogue.indices[ranked]).tolist())
    users, relevant = [], []
    for row in rows:
        user = str(histories.user_ids[row])
        wanted = sorted(by_user.get(user, ()))
        known = {item for item, index in zip(wanted, catalogue.indices_of(wanted), strict=True) if index >= 0}
        known -= set(generator.vocabulary.ids_of(histories.history(row)).tolist())
        known = known if allowed is None else known & allowed
        if known:
            users.append(user)
            relevant.append(known)
        if len(users) == count:
            break
    return users, relevant


def _cut_off(evaluated: dict, preferred: int, catalogue: int) -> int:
    """``preferred`` when the run's evaluation reports recall at it, else its smallest reported cut-off, else
    ``preferred`` bounded by a tenth of the catalogue (so that chance stays low)."""
    reported = sorted(int(key.split("@")[1]) for key in evaluated if key.startswith("recall@") and
                      key.split("@")[1].isdigit())
    if reported:
        return preferred if preferred in reported else reported[0]
    return max(1, min(preferred, catalogue // 10))


def _popular_recall(generator: CandidateGenerator, users: list, relevant: list, k: int) -> float:
    """Most-popular's mean recall@k on ``users``: the server's cold-start answer, their training items excluded."""
    histories = generator.histories
    seen = [generator.vocabulary.ids_of(histories.history(row)).tolist() for row in histories.rows_of(users)]
    answers = generator.recommend_batch([None] * len(users), excludes=seen, k=k)
    return float(np.mean([len(set(a.item_ids.tolist()) & wanted) / len(wanted)
                          for a, wanted in zip(answers, relevant, strict=True)]))
