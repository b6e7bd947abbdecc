"""Data layer: read + validate -> Vocabulary -> split -> example arrays (numpy) -> ``tf.data``.

:mod:`prepare` runs these as one set of tasks (partition, split, vocabularies, examples) on one partition in memory
or on many, streamed, on any engine (:mod:`engine`); :mod:`seeds` keys its randomness per user; :mod:`handoff` is what
a job asks of it and what training reads back.
Modules, one job each: :mod:`readers` (interaction logs and feature tables), :mod:`movielens` (GroupLens layouts),
:mod:`validate` (``InputError`` with file/column/row), :mod:`vocab` (ids <-> indices, counts), :mod:`splits`,
:mod:`order` (sequence or set: ``data.order`` and its detector), :mod:`examples` (next-item examples, skip-gram pairs,
``tf.data``), :mod:`set_examples` (set data: every pair a target, histories redrawn per epoch), :mod:`features`
(dense per-index feature arrays), :mod:`synthetic` (the bundled dataset's generator). TensorFlow is imported only by
the ``tf.data`` builders.
"""

from retrieval.data import movielens
from retrieval.data.examples import next_item_examples, noise_distribution, skipgram_pairs, to_dataset, user_sequences
from retrieval.data.features import FeatureSpec, feature_arrays, infer_specs
from retrieval.data.order import OrderDecision
from retrieval.data.readers import ColumnNames, guess_format, read_features, read_interactions, read_table
from retrieval.data.set_examples import SetExamples
from retrieval.data.splits import Split, align_to_train, from_files, leave_last_n_out, random_holdout, temporal_cutoff
from retrieval.data.vocab import Vocabulary

__all__ = [
    "ColumnNames", "FeatureSpec", "OrderDecision", "SetExamples", "Split", "Vocabulary", "align_to_train", "feature_arrays", "from_files",
    "guess_format", "infer_specs", "leave_last_n_out", "movielens", "next_item_examples", "noise_distribution",
    "random_holdout", "read_features", "read_interactions", "read_table", "skipgram_pairs", "temporal_cutoff",
    "to_dataset", "user_sequences",
]
