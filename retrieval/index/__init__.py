"""FAISS index of item vectors: build (factory strings or ``auto``; from an array or, in bounded memory, from
item-embedding Parquet file(s) read in chunks, ``ParquetVectors``), self-check recall against exact search with
search parameters tuned to a floor, save/load with an id map and manifest. No TensorFlow here; indexing a whole run
(with user embeddings as self-check queries) is ``retrieval.index.run_index.build_run_index``, which loads the
user tower."""

from retrieval.index.factory import auto_factory, canonical_metric
from retrieval.index.idmap import IdMap
from retrieval.index.item_index import ItemIndex, Neighbours, build_index
from retrieval.index.selfcheck import IndexQualityError, SelfCheck
from retrieval.index.source import ParquetVectors, VectorSource

__all__ = ["IdMap", "IndexQualityError", "ItemIndex", "Neighbours", "ParquetVectors", "SelfCheck", "VectorSource",
           "auto_factory", "build_index", "canonical_metric"]
