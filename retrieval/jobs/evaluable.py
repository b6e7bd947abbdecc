"""What a prepared run's data must allow, checked before any training (``check_prepared``): that it can be evaluated
at all, that the index fits the catalogue, and that an Item2Vec run's item ids fit the word2vec files it will export.

A test pair is *rankable* when its user has training history, its item is in the catalogue (the vocabulary built
from the training part) and, with ``eval.exclude_train``, the item is not already among the user's training items:
the evaluation scores exactly these (``retrieval.evaluation.evaluator``). A run with none (a single-user log, test
users all unknown under ``data.unknown_policy=keep``, a test file equal to the training file) could only end after
its whole training with a metric missing from the evaluation; it is refused here, in one line, instead. Likewise
an item id with whitespace, which word2vec's format cannot hold (``check_word2vec_ids``: named by its row in the
input file, not in the vocabulary).
"""

from __future__ import annotations

import ml_collections

from retrieval import artifacts
from retrieval.data import handoff, prepare, readers, validate
from retrieval.data.vocab import NUM_RESERVED, Vocabulary
from retrieval.errors import InputError
from retrieval.jobs import config_checks, sections
from retrieval.models.layout import score_layout


def rankable_pairs(paths: artifacts.RunPaths, exclude_train: bool) -> tuple[int, int]:
    """(rankable test pairs, test pairs) of a prepared run (see the module docstring); reads the test table and
    only the test users' training rows."""
    test = readers.read_run_interactions(paths.test_data)[["user_id", "item_id"]].drop_duplicates()
    if test.empty:
        return 0, 0
    train = readers.read_run_interactions(paths.train_data, test["user_id"].unique())[["user_id", "item_id"]]
    catalogue = set(Vocabulary.load(paths.item_vocab).ids)
    candidates = test[test["user_id"].isin(set(train["user_id"])) & test["item_id"].isin(catalogue)]
    if exclude_train:
        seen = candidates.merge(train.drop_duplicates(), on=["user_id", "item_id"], how="left", indicator=True)
        candidates = seen[seen["_merge"] == "left_only"]
    return len(candidates), len(test)


def check(paths: artifacts.RunPaths, exclude_train: bool, test_key: str) -> None:
    """Raises ``InputError`` (naming ``test_key``, where the test data comes from) when no test pair is rankable."""
    rankable, total = rankable_pairs(paths, exclude_train)
    if rankable:
        return
    why = ("no test data" if not total else
           f"none of the {total} test pairs has a user with training history and an item of the training catalogue"
           + (" that is not already among her training items" if exclude_train else ""))
    raise InputError(f"nothing can be evaluated: {why} (a single-user log, test users unknown to training, or a test "
                     "file equal to the training data?)", field=test_key)



def check_prepared(paths: artifacts.RunPaths, config: ml_collections.ConfigDict, settings: prepare.Settings) -> None:
    """What only the prepared data can tell, before any training (``InputError``; the stage then reruns): that
    something can be evaluated, that the index fits the catalogue, that Item2Vec's ids fit word2vec files."""
    check(paths, config.eval.exclude_train,
          "config.data.test_path" if config.data.split == "files" else "config.data.split")
    item_vocab = Vocabulary.load(paths.item_vocab)
    layout = score_layout(sections.Settled(config))  # the content width only the item table can cap
    config_checks.check_index(config, item_vocab.size - NUM_RESERVED,
                              handoff.content_terms(config.data, paths, item_vocab)
                              if layout.content_width else None)
    if config.model_type == "item2vec":
        check_word2vec_ids(paths, settings)


def check_word2vec_ids(paths: artifacts.RunPaths, settings: prepare.Settings) -> None:
    """Raises ``InputError`` naming the input file and row of the first item id that word2vec's format cannot hold
    (``validate.first_spaced_id``), found in the prepared vocabulary and located by a scan of the input files."""
    ids = list(Vocabulary.load(paths.item_vocab).ids[NUM_RESERVED:])
    spaced = validate.first_spaced_id(ids)
    if spaced is None:
        return
    message = (f"item id {ids[spaced]!r} is empty or contains whitespace, which the word2vec files of an Item2Vec "
               "run cannot hold; clean the ids or train configs/two_tower.py")
    for _, path in settings.sources:
        for frame in readers.interaction_batches(path, settings.format, settings.columns):
            found = frame.index[frame["item_id"] == ids[spaced]]
            if len(found):
                raise InputError(message, path=path, column=settings.columns.item, row=int(frame["row"][found[0]]))
    raise InputError(message, path=settings.sources[0][1], column=settings.columns.item)
