"""The two-tower model configuration: every key, its default, rule and meaning, in one place (:data:`MODEL`).

``default_config()`` is the ``config.model`` section of a pipeline config (``configs/two_tower.py``,
``configs/youtube_dnn.py``); ``build_model`` reads nothing else. Defaults were tuned on the bundled synthetic data and
MovieLens-1M (next-item, leave-last-one-out); see the README's models section for the numbers behind them.
"""

from __future__ import annotations

import dataclasses

import ml_collections

from retrieval.config_keys import (
    DIM,
    MAX_BATCH,
    MAX_DIM,
    MAX_HISTORY,
    SEED,
    Key,
    Needs,
    Section,
    flag,
    integer,
    integers,
    number,
    one_of,
)
from retrieval.models.poolings import POOLINGS

NEGATIVES = ("sampled", "in_batch")
LOG_Q_MODES = ("none", "static", "estimated")
SAMPLERS = ("unigram", "log_uniform", "uniform")


def pooled_history(what: str) -> Needs:
    """The rule of an item-tower term that pools the history's features: a pooling that does not read the order (not
    a sequence encoder)."""
    order_free = tuple(name for name, pooling in POOLINGS.items() if not pooling.reads_order)
    return Needs(lambda value, c: not value or not POOLINGS[c["model.user_tower.pooling"]].reads_order,
                 f"{what} pools the history's features: it needs model.user_tower.pooling "
                 + " or ".join(repr(name) for name in order_free))


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the builder and the config checks know of a training objective (its layer: ``objectives.py``).

    ``sources``: where its negatives may come from: ``"full"`` (every item), ``"sampled"`` (a candidate sampler),
    ``"in_batch"`` (the batch); with two, ``objective.negatives`` picks. A ``binary`` (logistic) objective adds a
    learned logit bias; ``corrected``: it subtracts log Q; ``removes_hits``: a negative equal to the positive is
    dropped; ``log_q``: the in-batch log-Q correction applies (``objective.log_q``).
    """

    sources: tuple[str, ...]
    binary: bool = False
    corrected: bool = True
    removes_hits: bool = True
    log_q: bool = True


# The objectives, by config.objective.name (the registry: builder, config checks and docs/reference.md read it).
OBJECTIVES: dict[str, Objective] = {
    "sampled_softmax": Objective(("sampled",)),
    "in_batch": Objective(("in_batch",)),
    "full_softmax": Objective(("full",)),
    "nce": Objective(NEGATIVES, binary=True, removes_hits=False),
    "negative_sampling": Objective(NEGATIVES, binary=True, corrected=False, removes_hits=False, log_q=False),
    "sampled_logistic": Objective(NEGATIVES, binary=True),
    "full_logistic": Objective(("full",), binary=True),
}


def negatives_of(name: str, negatives: str) -> str:
    """Where objective ``name``'s negatives come from with ``objective.negatives``: "full", "sampled" or "in_batch"
    ("" for an unknown name)."""
    sources = OBJECTIVES[name].sources if name in OBJECTIVES else ("",)
    return negatives if negatives in sources else sources[0]


def samples_negatives(name: str, negatives: str) -> bool:
    """Whether objective ``name`` with ``objective.negatives`` draws its negatives from a candidate sampler: those
    need ``num_negatives >= 1`` and are the ones that may score an output table."""
    return negatives_of(name, negatives) == "sampled"


def sampled_objectives() -> str:
    """The objectives that can draw sampled negatives, for messages."""
    return ", ".join(name + (" with negatives 'sampled'" if len(o.sources) > 1 else "")
                     for name, o in OBJECTIVES.items() if "sampled" in o.sources)


def taking(source: str) -> tuple[str, ...]:
    """The objectives whose negatives may come from ``source`` ("full", "sampled" or "in_batch")."""
    return tuple(name for name, o in OBJECTIVES.items() if source in o.sources)


# The model section, declared once (retrieval.config_keys): each key's default, rule and meaning. Defaults were tuned
# on the bundled synthetic data and MovieLens-1M (next-item, leave-last-one-out).
MODEL = Section("model", (
    Key("embedding_dim", 64, DIM,
        "Dimension d of the user and item vectors: the retrieval space searched by the index."),
    Key("temperature", 0.15, number(0, 1e3, low_open=True),
        "Logits are s(u, v) / temperature. 0.05-0.2 suits L2-normalised towers (cosine in [-1, 1] needs sharpening); "
        "use 1.0 for raw dot products. Validation recall@20 peaked at 0.1 on MovieLens-1M and at 0.2 on the bundled "
        "synthetic data (lower values overfit it); 0.15 loses little on both."),
    Key("l2_normalize", True, flag(),
        'L2-normalise both towers\' outputs, so the score is a cosine (exported metric "cosine", else "ip": inner product).'),
    Key("max_history", 50, integer(1, MAX_HISTORY),
        "Longest history the user tower sees in training (most recent first); the exported encoder pads/truncates to "
        "it."),
    Key("inference_history", 200, integer(0, 10 * MAX_HISTORY),
        "Set data only (data.order=none): the longest history at inference (validation, evaluation, recommend, serving; "
        "the exported encoder's cap). Training draws random subsets of at most max_history items; inference pools more "
        "of the set, a lower-variance view of the same user (measured: docs/objectives.md, \"Measurements behind the "
        "keys\"). Sequences always infer from the most recent max_history items, as they were trained. 0: "
        "max_history."),
    Key("inference_part_size", 0, integer(0, MAX_HISTORY),
        "Set data only: at inference, a history of more than this many items is dealt into parts of at most this many, "
        "and the user vector averages the parts' vectors (TwoTowerModel.user_vectors): the tower then pools histories "
        "of the size it was trained on. 0: the expected size of a training draw, max_history * data.history_keep; a "
        "value >= inference_history pools the whole history at once (measured: docs/objectives.md, \"Measurements "
        "behind the keys\")."),
    Key("seed", 42, SEED,
        "Seed of the initialisers and samplers (the pipelines set it from the top-level `seed`)."),
    Key("item_tower.id_embedding_dim", 64, DIM,
        "Width of the item-id embedding. With no item features and no hidden layers and a width equal to embedding_dim, "
        "the item vector is the id embedding itself (no projection)."),
    Key("item_tower.feature_embedding_dim", 16, DIM,
        "Width of each categorical / multi-valued item feature embedding (numeric features enter as they are)."),
    Key("item_tower.hidden_units", (), integers(1, 4 * MAX_DIM),
        "ReLU hidden layers of the item MLP; a linear layer to embedding_dim follows whenever a projection is needed."),
    Key("item_tower.id_dropout", 0.15, number(0, 1, high_open=True),
        "With item features only: the share of item ids replaced by the unknown-id row in training, on the candidate "
        "side and in histories (item-id dropout, DropoutNet, Volkovs et al. 2017), so the feature path learns to place "
        "an item alone: what embeds catalogue items nobody has clicked yet. 0.15 was chosen on validation data among "
        '0.15, 0.3 and 0.5 (configs/catalogue.py; benchmarks/bench_cold_start.py, JOURNAL.md "Issue 35").'),
    Key("item_tower.content_match", False, flag(),
        "With item features only: a linear map W of the item's feature encodings added to its vector, and the same W "
        "of the mean of the history items' feature encodings added to the user vector, so the score gains a learned "
        "content-match term (mean history features)^T W^T W (item features): the content profile's form (the "
        "cold-item evaluation's content baseline) with a learned metric, beside the towers' MLPs. Pooled histories "
        '(mean, attention) only. configs/catalogue.py sets it (JOURNAL.md, "Issue 35: a content-match term").',
        needs=(pooled_history("the content-match term"),)),
    Key("item_tower.cold_head", False, flag(),
        "With item features and id_dropout > 0 only: a second user head for the items placed by their features alone. "
        "The vector of an item read at the unknown-id row (cold items; in training, the dropped ids) lands in a second "
        "block of the item vector, the first block zero, so the user tower's second output scores it: the user's "
        "vector for new items is learned apart from the one for known items, and one softmax over both keeps their "
        "scores comparable. The exported vectors are twice embedding_dim wide, compared by inner product.",
        needs=(Needs(lambda on, c: not on or c["model.item_tower.id_dropout"] > 0,
                     "the cold head learns from the dropped ids: it needs model.item_tower.id_dropout > 0"),)),
    Key("item_tower.content_profile_weight", 0.0, number(0, 100),
        "With item features only: the weight g of the content profile's score, + g cos(profile, item): item vectors "
        "gain the item's TF-IDF content vector (the cold-item evaluation's content baseline) projected to "
        "content_profile_dim coordinates, times sqrt(g), the user vector the normalised mean of the history's, times "
        "sqrt(g) (retrieval.models.content_profile); the exported vectors are then compared by inner product. Needs "
        "cold_head: only the items placed by their features alone carry it, in training too (configs/catalogue.py "
        'sets 0.3). Pooled histories (mean, attention) only. 0: off.',
        needs=(
            pooled_history("the content profile"),
            Needs(lambda weight, c: not weight or not c["model.objective.output_table"],
                  "the content profile needs the item tower, not output_table"),
            Needs(lambda weight, c: not weight or c["model.objective.output_table"] or c["model.item_tower.cold_head"],
                  "the content profile is the cold head's term: it needs model.item_tower.cold_head"))),
    Key("item_tower.content_profile_dim", 64, DIM,
        "The most content-profile coordinates: the content vectors are projected on the catalogue's top right singular "
        "vectors (all terms, exactly, when there are at most this many)."),
    Key("user_tower.share_item_embeddings", True, flag(),
        "Embed the watched items with the item tower's id table (True) or with a separate table (False). With "
        "objective.output_table the shared table is the output softmax weights (tied input/output embeddings)."),
    Key("user_tower.history_embedding_dim", 64, DIM,
        "Width of the separate history table (used only when share_item_embeddings is False)."),
    Key("user_tower.pooling", "mean", one_of(POOLINGS),
        "Pooling of the masked history (indices < 2 never contribute; retrieval/models/poolings): "
        + "; ".join(f'"{name}" ({pooling.meaning})' for name, pooling in POOLINGS.items())
        + ". Set data (data.order=none) has no order to read: a pooling that reads it falls back to \"mean\", logged."),
    Key("user_tower.sequence.num_blocks", 2, integer(0, 64),
        "Transformer blocks, attention heads (the history width must be a multiple of them) and the dropout rate of the "
        "input, the attention weights and the residual branches (training only)."),
    Key("user_tower.sequence.num_heads", 1, integer(1, MAX_DIM)),
    Key("user_tower.sequence.dropout", 0.2, number(0, 1, high_open=True)),
    Key("user_tower.sequence.item_mask", 0.0, number(0, 1, high_open=True),
        "The share of history items the encoder sees as a learned mask embedding in training (the item-mask "
        "augmentation of CL4SRec, used as data augmentation; the targets stay as they were). 0: off."),
    Key("user_tower.sequence.every_position", True, flag(),
        "Train every position of the history at once: the state after each item predicts the item that followed it "
        "(SASRec's training; one example per user then covers all of the user's next-item targets: pair it with "
        "data.max_examples_per_user=1). False: only the example's label, from the most recent state."),
    Key("user_tower.user_id_embedding_dim", 0, integer(0, MAX_DIM),
        "Width of a user-id embedding concatenated to the pooled history; 0: none (the model then generalises to users "
        "it never saw, and unknown users get the same zero vector either way)."),
    Key("user_tower.user_id_gate", 0.0, number(0, 1, high_open=True),
        "With a user-id embedding: 0 concatenates it to the pooled history before the MLP; a gate g in (0, 1) adds it "
        "after the MLP instead, SimpleX's aggregation: u = g * e_user + (1 - g) * MLP(history, features), e_user then "
        "embedding_dim wide (user_id_embedding_dim only switches it on)."),
    Key("user_tower.feature_embedding_dim", 16, DIM,
        "Width of each categorical / multi-valued user feature embedding."),
    Key("user_tower.use_example_age", True, flag(),
        "Feed the example age (YoutubeDNN's freshness feature; 0 at serving) when the batches carry `example_age`."),
    Key("user_tower.hidden_units", (128,), integers(1, 4 * MAX_DIM),
        "ReLU hidden layers of the user MLP, followed by a linear layer to embedding_dim."),
    Key("objective.name", "in_batch", one_of(OBJECTIVES),
        "Softmax family (the score learns log P(item | user) up to a per-user constant: what retrieval ranks by): "
        "sampled_softmax: negatives from a candidate sampler shared by the batch (Jean et al. 2015, YoutubeDNN). "
        "in_batch: the other positives of the (global) batch are the negatives (Yi et al. 2019). full_softmax: every "
        "item is a negative (exact; small catalogues only). Binary (logistic) family: each candidate is a yes/no "
        "example, so the score's constant matters; a learned scalar bias (plus -log #items, or -log #noise for NEG) is "
        "added to the logit and never exported. nce: noise-contrastive estimation (Gutmann & Hyvarinen 2010): score -> "
        "log P(item | user), self-normalised (sum over items of exp(score) = 1): pick it when calibrated scores matter "
        "(thresholds, mixing sources). negative_sampling: word2vec's NEG, no correction: score -> log(P / Q), PMI-like; "
        'with sampler "unigram" it demotes popular items by their noise probability (a popularity debias you choose '
        "through distortion). sampled_logistic: NCE with the positive removed from the negatives: score -> log-odds "
        "log(P / (1 - P)). full_logistic: every item a binary negative (exact log-odds; the reference of the family; "
        "small catalogues). Which: for top-k ranking, in-batch negatives win and the loss matters less; pick nce when "
        "the score itself must mean something (log P), negative_sampling only to trade recall for the tail, the full_* "
        'objectives only for small catalogues (few steps per second); measured: docs/objectives.md, "Measurements '
        'behind the keys".'),
    Key("objective.negatives", "sampled", one_of(NEGATIVES),
        'nce / negative_sampling / sampled_logistic only: where the negatives come from. "sampled": num_negatives drawn '
        'by `sampler` (Q = its expected counts). "in_batch": the other positives of the batch are the noise (free: no '
        "extra item-tower passes, and XLA-compilable), with log_q the correction (static: (B - 1) count / total, the "
        "expected count among a row's noise), plus num_negatives mixed-in sampled ones. The other objectives ignore it."),
    Key("objective.num_negatives", 0, integer(0, MAX_BATCH),
        'Sampled negatives per batch: sampled_softmax\'s (or a binary objective\'s, negatives="sampled") negatives, or '
        'the in-batch objectives\' extra ("mixed") negatives (at most every item once: a smaller catalogue is drawn '
        'whole), 0: none.',
        needs=(Needs(
            lambda n, c: n >= 1 or not samples_negatives(c["model.objective.name"], c["model.objective.negatives"]),
            lambda n, c: f"{c['model.objective.name']} with sampled negatives needs at least 1"),)),
    Key("objective.sampler", "unigram", one_of(SAMPLERS),
        'Candidate sampler: "unigram" (training counts ** distortion), "log_uniform" (Zipfian over indices, which the '
        'vocabulary orders by decreasing count), "uniform".'),
    Key("objective.distortion", 0.75, number(0, 10),
        "Exponent applied to the counts by the unigram sampler."),
    Key("objective.log_q", "static", one_of(LOG_Q_MODES),
        'Log-Q correction of in-batch negatives (in_batch, and nce / sampled_logistic with negatives="in_batch"; '
        'negative_sampling has none): "none", "static" (log count/total from the training counts: the per-draw '
        'probability, exact for a fixed training set) or "estimated" (Yi et al. 2019 estimator of the probability that '
        "an item is in a batch, updated once per training step and checkpointed; it adapts to drift, but saturates at 1 "
        "for items in nearly every batch, which under-corrects the head when batch_size * frequency ~ 1: small "
        'catalogues, large batches). "none" is kept for comparison: it recommends popular items.'),
    Key("objective.estimator_buckets", 0, integer(0, 1 << 28),
        'The frequency estimator (log_q="estimated"): hash buckets (0: the item vocabulary size, which makes the first '
        "hash collision-free), learning rate alpha (about 1/alpha occurrences to adapt) and number of hash functions."),
    Key("objective.estimator_alpha", 0.01, number(0, 1, low_open=True)),
    Key("objective.estimator_hashes", 1, integer(1, 64)),
    Key("objective.output_table", False, flag(),
        "Objectives with sampled negatives only: score candidates with a separate output table plus a per-item bias "
        "(the classic YoutubeDNN softmax layer) instead of the item tower. Item vectors are then [w_i, b_i] and user "
        "vectors [u / temperature, 1].",
        needs=(Needs(
            lambda on, c: not on or samples_negatives(c["model.objective.name"], c["model.objective.negatives"]),
            lambda on, c: f"the output table needs sampled negatives: {sampled_objectives()}"),)),
), __name__)


def default_config() -> ml_collections.ConfigDict:
    """Returns a new ``config.model`` section of the declared defaults (a two-tower model trained with in-batch
    softmax)."""
    return MODEL.config()


def inference_part_size(model: ml_collections.ConfigDict, history_keep: float) -> int:
    """``model.inference_part_size`` resolved: 0 stands for the expected size of a set-data training draw,
    ``max_history * history_keep`` (``data.history_keep``), so inference pools parts of the size the tower was
    trained on."""
    return model.inference_part_size or max(1, round(model.max_history * history_keep))
