"""Self-check of an approximate index: recall@k against exact search, and search parameters tuned to a floor.

recall@k = |approximate top-k  with exact score >= the k-th exact score| / k, averaged over queries: the
ann-benchmarks definition (Aumueller et al. 2020), which counts a tie at the k-th place as a hit instead of
depending on how two exact searches break it. Approximate results are judged by id against the exact neighbours
(computed once per query set, a chunk of the catalogue at a time, so that a 10M-item catalogue need not be in
memory), so a quantized index gets no credit for its own distance errors.

Tuning (``tune``): the knob of the index (``nprobe`` for IVF, ``efSearch`` for HNSW, the knobs FAISS's
``ParameterSpace`` lists for it) walks powers of two, like that ParameterSpace's own grid, up to the exhaustive
setting (nprobe = nlist) or a large efSearch; the first value reaching the target is refined by bisection on the
integers between it and the previous one. That assumes recall does not decrease as the knob grows: exact for
IVF-Flat (more lists probed = a superset of candidates, exact distances), true in practice for HNSW and IVF-PQ.
Refined indexes (``...,RFlat``) also have ``k_factor_rf`` (re-rank k * k_factor shortlisted candidates exactly):
the smallest nprobe at the largest factor bounds all factors from below; each factor 1, 2, 4, ... gets its smallest
nprobe within 4x that bound, and the fastest of those settings (timed on the tuning queries) wins. Parameters are
always set with ``faiss.ParameterSpace().set_index_parameter`` (which reaches through ``IndexIDMap2``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import faiss
import numpy as np

from retrieval.errors import GateError
from retrieval.index.factory import METRICS
from retrieval.index.source import VectorSource, as_source

EF_SEARCH_MAX = 8192
K_FACTOR_MAX = 64
REFINE_PROBE_WINDOW = 4
RELATIVE_TIE_TOLERANCE = 1e-4
TIE_DEPTH = 2


class IndexQualityError(GateError):
    """The index stays below the recall floor even at its most thorough search parameters.

    Not a user input mistake (the data and configuration are valid; this index type cannot reach the quality asked
    for), so it is a quality-gate refusal: ``retrieval.cli.run`` exits with code 3 and nothing is written.
    ``check`` is the failed ``SelfCheck``.
    """

    def __init__(self, message: str, check: SelfCheck | None = None):
        super().__init__(message)
        self.check = check


@dataclasses.dataclass(frozen=True)
class SelfCheck:
    """Outcome of the build-time self-check, stored in the index manifest."""

    k: int
    floor: float
    recall: float  # on the check queries, held out from tuning
    tuning_recall: float  # on the tuning queries, at the chosen parameters
    num_queries: int
    num_tuning_queries: int
    query_source: str  # "users" (real user embeddings) or "items" (a sample of item vectors)
    search_params: dict
    settings_tried: int

    @property
    def passed(self) -> bool:
        return self.recall >= self.floor

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "passed": self.passed}


def exact_search(vectors: np.ndarray | VectorSource, ids: np.ndarray, queries: np.ndarray, k: int,
                 metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` (higher-is-better scores [Q, k], ``ids`` of the rows [Q, k], -1 where fewer exist) of
    ``queries`` over ``vectors`` (prepared), one chunk at a time (``faiss.knn`` per chunk, merged in a
    ``faiss.ResultHeap``), so the catalogue need not be in memory."""
    source, ids = as_source(vectors), np.asarray(ids, dtype=np.int64)
    heap, start = faiss.ResultHeap(len(queries), k, keep_max=metric != "l2"), 0
    for chunk in source.chunks():
        distances, rows = faiss.knn(queries, chunk, min(k, len(chunk)), metric=METRICS[metric])
        heap.add_result(distances, np.where(rows >= 0, ids[start + np.maximum(rows, 0)], -1))
        start += len(chunk)
    heap.finalize()
    return (-heap.D if metric == "l2" else heap.D), heap.I


class RecallProbe:
    """recall@k of an index for fixed queries. The exact neighbours are computed once (``exact_search``), TIE_DEPTH * k
    deep: a result is a hit if it is among them with a score within the tie tolerance of the exact k-th (found items
    beyond that depth score below the k-th unless more than TIE_DEPTH * k items tie with it)."""

    def __init__(self, vectors: np.ndarray | VectorSource, ids: np.ndarray, queries: np.ndarray, k: int, metric: str):
        self.queries, self.k, self.metric = queries, int(k), metric
        scores, found = exact_search(vectors, ids, queries, min(TIE_DEPTH * self.k, as_source(vectors).count), metric)
        self.kth = scores[:, self.k - 1]
        tolerance = RELATIVE_TIE_TOLERANCE * np.maximum(1.0, np.abs(self.kth))
        hits = (found >= 0) & (scores >= (self.kth - tolerance)[:, None])
        self._base = int(max(found.max(initial=0), np.max(ids, initial=0))) + 1
        self._hits = np.unique((np.arange(len(queries))[:, None] * self._base + found)[hits])

    def __call__(self, index: faiss.Index) -> float:
        _, found = index.search(self.queries, self.k)
        keys = np.arange(len(found))[:, None] * self._base + found
        hits = (found >= 0) & np.isin(keys, self._hits, assume_unique=False)
        return float(hits.sum() / hits.size)


def _knob(index: faiss.Index) -> tuple[str | None, bool]:
    """(the primary search knob of ``index`` or None, whether it has a refine stage), from its ParameterSpace."""
    space = faiss.ParameterSpace()
    space.initialize(faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap) else index)
    names = {space.parameter_ranges.at(i).name for i in range(space.parameter_ranges.size())}
    primary = next((name for name in ("nprobe", "efSearch") if name in names), None)
    return primary, "k_factor_rf" in names


def _grid(knob: str, index: faiss.Index, k: int) -> list[int]:
    """Powers of two from 1 (nprobe) or k (efSearch, HNSW never keeps fewer than k) to the exhaustive setting."""
    if knob == "nprobe":
        top = int(faiss.extract_index_ivf(index).nlist)
        start = 1
    else:
        top = min(EF_SEARCH_MAX, max(k, 2 ** int(np.ceil(np.log2(max(index.ntotal, 2))))))
        start = 2 ** int(np.ceil(np.log2(k)))
    values = [v for v in (2 ** i for i in range(64)) if start <= v < top]
    return values + [top]


def apply_search_params(index: faiss.Index, params: dict) -> None:
    """Sets ``params`` (e.g. ``{"nprobe": 12}``) on ``index`` through FAISS's ParameterSpace (IDMap-aware)."""
    space = faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, float(value))


def _smallest_passing(measure: Callable[[int], float], grid: list[int], target: float) -> tuple[int, float, int]:
    """(smallest value reaching ``target`` or the last grid value, its recall, evaluations) by grid + bisection."""
    evaluations, previous = 0, None
    for value in grid:
        recall = measure(value)
        evaluations += 1
        if recall >= target:
            break
        previous = value
    else:
        return grid[-1], recall, evaluations
    low, high, best = previous, value, recall
    while low is not None and high - low > 1:
        middle = (low + high) // 2
        recall = measure(middle)
        evaluations += 1
        if recall >= target:
            high, best = middle, recall
        else:
            low = middle
    return high, best, evaluations


def tune(index: faiss.Index, probe: RecallProbe, target: float) -> tuple[dict, float, int]:
    """Cheapest search parameters reaching recall ``target`` on ``probe``'s queries (see the module docstring);
    returns (params, recall, settings tried) and leaves ``index`` set to those params. Flat: ({}, recall, 1)."""
    knob, refine = _knob(index)
    if knob is None:
        return {}, probe(index), 1
    tried = 0

    def smallest(fixed: dict, values: list[int]) -> tuple[int, float]:
        nonlocal tried

        def measure(value: int) -> float:
            apply_search_params(index, {**fixed, knob: value})
            return probe(index)

        value, recall, evaluations = _smallest_passing(measure, values, target)
        tried += evaluations
        return value, recall

    grid = _grid(knob, index, probe.k)
    if not refine:
        value, recall = smallest({}, grid)
        params = {knob: value}
    else:
        params, recall = _tune_refined(index, probe, knob, grid, target, smallest)
    apply_search_params(index, params)
    return params, recall, tried


def _tune_refined(index: faiss.Index, probe: RecallProbe, knob: str, grid: list[int], target: float,
                  smallest: Callable[[dict, list[int]], tuple[int, float]]) -> tuple[dict, float]:
    """(params, recall) for an index with a refine stage: the fewest probes reaching the target at all (at
    K_FACTOR_MAX, where re-ranking is nearly exact) bound every factor from below; factors 1, 2, 4, ... then get
    their smallest nprobe within REFINE_PROBE_WINDOW times that bound (stopping at the first that needs no more than
    the bound), and the fastest of those settings on the tuning queries wins."""
    fewest, recall = smallest({"k_factor_rf": K_FACTOR_MAX}, grid)
    if recall < target:
        return {"k_factor_rf": K_FACTOR_MAX, knob: fewest}, recall
    window = [fewest] + [v for v in grid if fewest < v <= REFINE_PROBE_WINDOW * fewest]
    settings, factor = [], 1
    while factor <= K_FACTOR_MAX:
        value, factor_recall = smallest({"k_factor_rf": factor}, window)
        if factor_recall >= target:
            params = {"k_factor_rf": factor, knob: value}
            apply_search_params(index, params)
            seconds = min(_timed(lambda: index.search(probe.queries, probe.k)) for _ in range(3))  # min: robust to load
            settings.append((seconds, params, factor_recall))
            if value == fewest:
                break
        factor *= 2
    _, params, recall = min(settings, key=lambda setting: setting[0])
    return params, recall


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def self_check(index: faiss.Index, vectors: np.ndarray | VectorSource, ids: np.ndarray, queries: np.ndarray, query_source: str,
               metric: str, k: int, floor: float, margin: float, search_params: dict | None) -> SelfCheck:
    """Tunes ``index`` on the first half of ``queries`` to ``floor + margin`` (unless ``search_params`` are given,
    which are applied as they are) and measures recall@k on the other half. Raises nothing: the caller decides."""
    k = int(min(k, as_source(vectors).count))
    half = max(1, len(queries) // 2)
    tuning = RecallProbe(vectors, ids, queries[:half], k, metric)
    check = RecallProbe(vectors, ids, queries[half:] if len(queries) > 1 else queries, k, metric)
    if search_params is None:
        params, tuning_recall, tried = tune(index, tuning, min(1.0, floor + margin))
    else:
        params = {name: float(value) for name, value in search_params.items()}
        apply_search_params(index, params)
        tuning_recall, tried = tuning(index), 1
    return SelfCheck(k=k, floor=float(floor), recall=check(index), tuning_recall=tuning_recall,
                     num_queries=len(check.queries), num_tuning_queries=len(tuning.queries),
                     query_source=query_source, search_params=params, settings_tried=tried)
