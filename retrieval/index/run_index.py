"""Index a run: ``<run>/item_embeddings.parquet`` -> ``<run>/index/``, self-checked with real user queries.

The embeddings are read in record batches (``retrieval.index.source.ParquetVectors``; ``item_embeddings.parquet`` may
also be a directory of ``*.parquet`` shards, read in name order), so building holds the index and one chunk in
memory, not the whole catalogue.

The self-check queries are the user tower's embeddings of a seeded sample of training users (their stored
histories), i.e. the queries the server will actually send; item vectors stand in only when the run has no user tower
or no training data. The histories are read through the tower's training vocabulary, as serving reads them
(``CandidateGenerator.vocabulary``: a catalogue refresh's ``vocab/training_items.parquet``, else the catalogue), so an
item a refresh removed from the catalogue still counts in the histories that hold it. The index metric is the run's
(``dot`` -> inner product, ``cosine``), its model version the run's.

A run whose manifest says ``item_similarity: score_correlation`` (the cold head's two blocks of item vectors) also
gets its item-to-item index, ``index/similar/`` (``retrieval.index.similar``), from the same sample of user vectors,
over the folded vectors when the embeddings carry ``placed_by_features``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from retrieval.artifacts import PathLike, RunPaths, read_json
from retrieval.data.histories import UserHistories
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.export import load_user_encoder
from retrieval.index import IdMap, ItemIndex, build_index
from retrieval.index.similar import SCORE_CORRELATION, build_similar_index, similarity_vectors
from retrieval.index.source import ParquetVectors


def user_queries(encoder, histories: UserHistories, id_map: IdMap, count: int, seed: int,
                 max_history: Optional[int] = None) -> np.ndarray:
    """User-tower embeddings [<= count, d] of a seeded sample of training users, from their stored histories
    (indices of ``id_map``, the items the tower reads)."""
    rows = histories.sample(count, seed)
    return encoder.encode(histories.user_ids[rows].tolist(),
                          [id_map.ids_of(histories.history(r)[:max_history]).tolist() for r in rows])


def _user_sample(paths: RunPaths, count: int, seed: int) -> Optional[np.ndarray]:
    """A seeded sample of ``count`` training users from the run's user vocabulary, so that only their histories are
    read; None (read every history) when the run has no user vocabulary or no more users than that."""
    if not paths.user_vocab.is_file():
        return None
    users = Vocabulary.load(paths.user_vocab).ids[NUM_RESERVED:]
    if len(users) <= count:
        return None
    return users[np.random.default_rng(seed).choice(len(users), count, replace=False)]


def build_run_index(run_dir: PathLike | RunPaths, *, factory: str = "auto", recall_floor: float = 0.95,
                    recall_k: int = 100, num_check_queries: int = 1000, seed: int = 0,
                    search_params: Optional[dict] = None, save: bool = True, encoder=None) -> ItemIndex:
    """Builds the run's item index (``retrieval.index.build_index``; raises ``IndexQualityError`` below the recall
    floor), with its item-to-item index when the run asks for one (module docstring), and, if ``save``, writes it
    atomically to ``<run>/index/``. ``encoder``: an already loaded user tower."""
    paths = run_dir if isinstance(run_dir, RunPaths) else RunPaths(run_dir)
    if not paths.manifest.is_file():
        raise InputError("not a run directory (no manifest.json)", path=str(paths.root))
    manifest = read_json(paths.manifest)
    if "metric" not in manifest:
        raise InputError("the run manifest has no 'metric'", path=str(paths.manifest), field="metric")
    vectors = ParquetVectors(paths.item_embeddings)
    id_map = IdMap(vectors.item_ids())
    queries = None
    if paths.train_data.is_file() and (encoder is not None or paths.user_tower.is_dir()):
        encoder = encoder if encoder is not None else load_user_encoder(paths.user_tower)
        vocabulary = (IdMap(Vocabulary.load(paths.training_item_vocab).ids[NUM_RESERVED:])
                      if paths.training_item_vocab.is_file() else id_map)  # what the user tower reads
        histories = UserHistories.from_parquet(paths.train_data, vocabulary,
                                               _user_sample(paths, num_check_queries, seed))
        if len(histories):
            queries = user_queries(encoder, histories, vocabulary, num_check_queries, seed,
                                   int(manifest.get("max_history") or 0) or None)
    options = {"factory": factory, "recall_floor": recall_floor, "recall_k": recall_k,
               "num_check_queries": num_check_queries, "search_params": search_params, "seed": seed,
               "model_version": manifest.get("version")}
    index = build_index(vectors, id_map, metric=manifest["metric"], queries=queries, **options)
    index.manifest["run_id"] = manifest.get("run_id")
    if manifest.get("item_similarity") == SCORE_CORRELATION:
        if queries is None:
            raise InputError("the run's item-to-item similarity (score correlation) needs user vectors: its user tower "
                             "and training data", path=str(paths.root))
        index.similar = build_similar_index(similarity_vectors(paths.item_embeddings), id_map, queries, **options)
    if save:
        index.save(paths.index)
    return index
