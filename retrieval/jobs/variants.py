"""Variants of the configured towers that the tuning phase tries on the run's own holdout (``train.variants``).

One recipe does not fit every log: the temperature that suits a large sparse catalogue (0.1: Yelp2018, Gowalla,
MovieLens-1M's sets) overfits a small or dense one within two epochs, where twice that temperature reads more on the
holdout (validation recall@20: the bundled data 0.2797 -> 0.3057, MovieLens-100K's time-ordered log 0.3217 ->
0.3546, Last.fm 0.2940 -> 0.2966; benchmarks/JOURNAL.md, "Issue 47: the temperature, chosen by the run"). So a run
whose tuning part is small (``train.variant_max_examples``) tunes each listed variant as well, and keeps whichever
reads the highest validation metric (``retrieval.jobs.tuning.tune``); the refit and the export follow the choice.

A variant is a name, one line saying what it changes, the overrides it makes to the run's config (dotted keys,
computed from that config) and the runs it suits (``unsuited``: why not, or None). Adding one is a function and a
registry line here, and its name in ``retrieval.settings.VARIANTS`` (the key's rule). Written by hand: none of the dependencies chooses among model
configurations on a holdout inside a resumable job.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Mapping, Optional

import ml_collections

from retrieval import settings
from retrieval.data import handoff


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named change to the run's config: ``overrides(config, data)`` maps dotted keys to their values in the
    variant (``data``: the run's prepared data, None where there is none, as in ``configs/sequential.py``);
    ``unsuited(config, data)`` says why the run's config or prepared data cannot use it (None: they can)."""

    name: str
    description: str
    overrides: Callable[[ml_collections.ConfigDict, Optional[handoff.PreparedData]], Mapping[str, Any]]
    unsuited: Callable[[ml_collections.ConfigDict, handoff.PreparedData], Optional[str]] = lambda config, data: None


def _softer(config: ml_collections.ConfigDict, data: Optional[handoff.PreparedData]) -> Mapping[str, Any]:
    return {"model.temperature": 2.0 * float(config.model.temperature)}


SEQUENCE_EPOCHS = 30  # the self-attentive variant's epoch cap: configs/sequential.py's schedule
FINAL_EPOCHS = 2 * SEQUENCE_EPOCHS  # ... when its tuning is final (_tuned_is_final): the tuning's and the refit's
POSITIONS_PER_STEP = 2048  # the self-attentive variant's step: about this many target positions (users_per_step)
USERS_PER_STEP = (16, 256)  # ... in at least 16 and at most 256 users (configs/sequential.py's batch)


def users_per_step(config: ml_collections.ConfigDict, data: Optional[handoff.PreparedData]) -> int:
    """The self-attentive variant's batch: users whose histories hold about ``POSITIONS_PER_STEP`` target positions
    (each user's last ``max_history + 1`` items, at the data's mean items per user), within ``USERS_PER_STEP``.

    Why: every position of every history in a step is a target, and each is scored against all the step's target
    items (in-batch negatives), so a step costs the square of its positions. Short histories (Amazon Beauty: about 7
    training items per user) fill 256 users with about 1,800 positions; the bundled log's 49 items per user filled
    12,500 positions at 256 users, 2.2 s a step and 6 minutes of the README's command. At 42 users a step there,
    an epoch costs 8.5 s instead of 16 s, and validation recall@20 stayed within the holdout's noise (0.3017 at 256
    users; 0.2963-0.3160 at 30-42: benchmarks/JOURNAL.md, "The self-attentive variant's step"). Without data
    (``configs/sequential.py``): 256."""
    low, high = USERS_PER_STEP
    if data is None or not data.items_per_user:
        return high
    positions = min(float(data.items_per_user), int(config.model.max_history) + 1)
    return int(min(max(round(POSITIONS_PER_STEP / positions), low), high))


SEQUENCE_MIXED_NEGATIVES = 2048  # uniform negatives beside the in-batch ones of the self-attentive variant's step
MIXED_FROM_ITEMS = 4 * POSITIONS_PER_STEP  # ... where the catalogue has at least this many items


def _mixed_negatives(config: ml_collections.ConfigDict, data: Optional[handoff.PreparedData]) -> Mapping[str, Any]:
    """The self-attentive variant's extra negatives: with the in-batch softmax, ``SEQUENCE_MIXED_NEGATIVES`` drawn
    uniformly from the catalogue for the whole step (mixed negative sampling, Yang et al. 2020, log-Q corrected
    jointly with the in-batch ones; none for another objective). A step's in-batch negatives are its own ~2,048
    targets, drawn by popularity: on a long-tailed catalogue of many times that (Amazon Beauty's 12,101 items) they
    rarely reach the tail the full softmax covers, and the uniform ones do: on Beauty's validation draw
    ``configs/sequential.py`` read HR@20 0.1479 and 0.1497 with them against 0.1434 and 0.1470 without (two seeds;
    4,096: 0.1487; the exact full softmax 0.1497 at twice the training time, this at 1.2x). On a catalogue a step's
    targets already cover (the bundled 2,000 items) they lost: the variant's holdout recall@20 0.3080 against 0.3197
    (benchmarks/JOURNAL.md, "Issue 48: mixed negatives for the self-attentive tower"). So a run mixes them in only
    from ``MIXED_FROM_ITEMS`` items; ``configs/sequential.py`` (no data known) always."""
    if config.model.objective.name != "in_batch":
        return {}
    if data is not None and data.items is not None and data.items < MIXED_FROM_ITEMS:
        return {}
    return {"model.objective.num_negatives": SEQUENCE_MIXED_NEGATIVES, "model.objective.sampler": "uniform"}


def _tuned_is_final(data: Optional[handoff.PreparedData]) -> Mapping[str, Any]:
    """With a sampled sequence holdout (``train.sequence_holdout_users``), the self-attentive variant's tuning is the
    final model: one schedule of up to ``FINAL_EPOCHS`` (the budget plans it), trained to its last epoch, no refit.
    The tuning had every other user's last item among its targets, so a slow box spends its budget on one schedule,
    not on a tuning and a refit of the same length; and a refit from scratch that the budget cannot hold is never
    replaced by towers that never saw the users' last items (on Beauty's validation draw, a box that slowed during
    the tuning skipped the refit and read HR@20 0.1282; this policy 0.1471, the shipped one 0.1474 where the refit
    ran). The last weights of the annealed schedule, not the best epoch of a holdout that moves by its noise (+-0.005
    HR@20 on 5,000 users), as ``configs/sequential.py`` ships (benchmarks/JOURNAL.md, "Issue 48: a sampled holdout
    with the tuned tower final")."""
    if data is None or not (data.holdout or {}).get("sampled_users"):
        return {}
    return {"train.refit": False, "train.early_stopping_patience": 0, "train.epochs": FINAL_EPOCHS}


def _self_attention(config: ml_collections.ConfigDict, data: Optional[handoff.PreparedData]) -> Mapping[str, Any]:
    """SASRec's tower (Kang and McAuley 2018) as ``configs/sequential.py`` ships it: the causal encoder over the item
    table it shares with the item tower, every position a target; early-stopped like the recipe, or with a sampled
    holdout trained to the end and final (``_tuned_is_final``)."""
    return {
        "model.user_tower.pooling": "self_attention",
        # One example per user, its most recent label: with every_position it carries all of the user's next-item
        # targets (the last max_history + 1 items), SASRec's training.
        "model.user_tower.sequence.every_position": True,
        "data.max_examples_per_user": 1,
        # A shared input / output item table (SASRec's), the encoder's state projected linearly (no hidden layer), at
        # the recipe's 128 wide: on Beauty's automatic holdout validation HR@20 reached 0.1426 against 0.1371 at
        # SASRec's 64 (30-epoch schedules), for about twice the CPU time of an epoch
        # (JOURNAL.md, "Issue 37: width and schedule").
        "model.user_tower.share_item_embeddings": True,
        "model.user_tower.hidden_units": (),
        # A seeded 30% of the history's items hidden behind a learned mask embedding in training (item-mask
        # augmentation; the targets stay): on Beauty's automatic holdout, validation HR@20 at epochs 10-16 read
        # 0.1411-0.1426 without it, 0.1430-0.1446 at 0.1, 0.1420-0.1472 at 0.2 (two runs) and 0.1423-0.1469 at 0.3,
        # rising to 0.1504 by epoch 21 (JOURNAL.md, "Issue 37: item-mask augmentation").
        "model.user_tower.sequence.item_mask": 0.3,
        # About 2,048 target positions a step (the in-batch negatives of every position): 256 users of short
        # histories, fewer of long ones.
        "train.batch_size": users_per_step(config, data),
        **_mixed_negatives(config, data),
        # configs/sequential.py's 30-epoch cosine schedule, early-stopped sooner than the recipe. The cap sets how
        # fast the learning rate falls: under a cap of 200 (five times the recipe's, when an epoch of the bundled
        # log was 12 steps) it had barely fallen by epoch 19 and Beauty's holdout HR@20 read 0.1129 there, against
        # 0.1394 by epoch 10 under this one (benchmarks/JOURNAL.md, "The self-attentive variant's schedule").
        "train.epochs": SEQUENCE_EPOCHS,
        "train.early_stopping_patience": 5,
        **_tuned_is_final(data),
    }


def _user_ids(config: ml_collections.ConfigDict, data: Optional[handoff.PreparedData]) -> Mapping[str, Any]:
    """A user-id embedding beside the pooled history, SimpleX's gated sum (Mao et al. 2021): u = g e_user + (1 - g)
    MLP(history). Alone it lost where item-item structure is weak (Yelp2018's holdout) and barely moved Gowalla's;
    with the item-item teacher on Gowalla it lifted the holdout well above both (benchmarks/JOURNAL.md, "Issue 47:
    user ids with the teacher"), so ``train.teacher_variant`` tunes it with the teacher."""
    return {"model.user_tower.user_id_embedding_dim": int(config.model.embedding_dim),
            "model.user_tower.user_id_gate": 0.5}


def _sequences_in_memory(config: ml_collections.ConfigDict, data: handoff.PreparedData) -> Optional[str]:
    item_tower = config.model.item_tower
    if config.data.item_features and (item_tower.content_match or item_tower.content_profile_weight > 0):
        return "the item tower's content-match term and content profile read a pooled history"
    if data.is_set:
        return "the log is read as sets, where the encoder has no order to read"
    if data.streamed:
        return "the examples are streamed, and one example per user needs them in memory"
    return None


VARIANTS = {variant.name: variant for variant in (
    Variant("softer", "the temperature doubled", _softer),
    Variant("self_attention", "the self-attentive user tower of configs/sequential.py", _self_attention,
            _sequences_in_memory),
    Variant("user_ids", "a user-id embedding in the user tower, gated as in SimpleX", _user_ids),
)}
assert tuple(VARIANTS) == settings.VARIANTS, "retrieval.settings.VARIANTS names the registered variants"


def apply(config: ml_collections.ConfigDict, name: Optional[str],
          data: Optional[handoff.PreparedData] = None) -> ml_collections.ConfigDict:
    """``config`` itself without a variant (``name`` None), else a copy with the variant's overrides (for the run's
    prepared ``data``, when given)."""
    if name is None:
        return config
    changed = copy.deepcopy(config)  # its references (the seeds' to config.seed) kept within the copy
    changed.update_from_flattened_dict(dict(VARIANTS[name].overrides(config, data)))
    return changed


def describe(config: ml_collections.ConfigDict, name: str, data: Optional[handoff.PreparedData] = None) -> str:
    """One line: the variant's name, what it changes, and the values it sets, e.g. ``softer (the temperature
    doubled: model.temperature=0.2)``."""
    values = ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                       for key, value in VARIANTS[name].overrides(config, data).items())
    return f"{name} ({VARIANTS[name].description}: {values})"
