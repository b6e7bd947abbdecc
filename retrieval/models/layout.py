"""The layout of the exported vectors, computed from the config without TensorFlow: how wide the index's vectors are.

A two-tower run exports items as ``[id block(s), content coordinates, bias]``:

- one block of ``model.embedding_dim`` (the item tower's vector), or two with the cold head
  (``model.item_tower.cold_head`` and an item table): items read by id fill the first, items placed by their features
  alone the second, each scored by a head of its own (``towers.ItemTower``);
- with the content profile (``model.item_tower.content_profile_weight > 0`` and an item table), its fixed content
  coordinates: ``model.item_tower.content_profile_dim`` of them, fewer when the catalogue's features have fewer terms
  (``retrieval.data.content.projection`` keeps them all then: ``content.term_count``);
- with the YoutubeDNN output table (``model.objective.output_table``), its per-item bias as one more coordinate.

Its metric is the index's: "cosine" for L2-normalised towers (``model.l2_normalize``) whose vectors are one block, else
"ip" (inner product).

Item2Vec exports ``item2vec.dim``. One computation for every reader: the up-front config check reads the width before
the data is known (the content width at its most), the prepared-data check with the catalogue's own term count, and
``build_model`` hands the layout of the model section and the feature tables to the towers, which build its blocks
and nothing else (``tests/models/test_layout.py`` builds each kind and compares).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional


@dataclasses.dataclass(frozen=True)
class ScoreLayout:
    """``heads`` id blocks of ``block_width``, then ``content_width`` content coordinates, then a bias if ``bias``;
    ``normalized``: the towers L2-normalise their outputs (``model.l2_normalize``; Item2Vec's vectors are compared by
    cosine), which makes the vectors' similarity a cosine where they are one block (:attr:`metric`)."""

    block_width: int
    heads: int = 1
    content_width: int = 0
    bias: bool = False
    normalized: bool = False

    @property
    def dimension(self) -> int:
        """The exported vectors' width."""
        return self.block_width * self.heads + self.content_width + int(self.bias)

    @property
    def one_block(self) -> bool:
        """The vectors are one block and nothing else (no second head, content coordinates or bias)."""
        return self.heads == 1 and not self.content_width and not self.bias

    @property
    def metric(self) -> str:
        """The exported vectors' similarity, as the index names it: "cosine" for normalised vectors of one block
        (neither a cold head's second block, content coordinates nor a bias widen them), else "ip" (inner product)."""
        return "cosine" if self.normalized and self.one_block else "ip"


def score_layout(config: Mapping[str, Any], content_terms: Optional[int] = None) -> ScoreLayout:
    """The layout a run's config exports (``config``: every declared key by its dotted name, the config's value or
    the declared default: ``jobs.sections.Settled``). ``content_terms``: the catalogue's content vector width
    (``retrieval.data.content.layout``), None before the data is known (the content width is then its most)."""
    if config["model_type"] == "item2vec":
        return ScoreLayout(int(config["item2vec.dim"]), normalized=True)
    return two_tower_layout(config, bool(str(config["data.item_features"] or "").strip()), content_terms)


def two_tower_layout(config: Mapping[str, Any], item_features: bool,
                     content_terms: Optional[int] = None) -> ScoreLayout:
    """The layout of a two-tower model: ``config``, the model section's keys by dotted name (``"model.embedding_dim"``;
    ``score_layout``'s mapping, or ``build_model``'s section settled); ``item_features``: the items have a feature
    table; ``content_terms`` as in :func:`score_layout`. The builder hands it to the towers, which build these
    blocks."""
    dim, normalized = config["model.embedding_dim"], bool(config["model.l2_normalize"])
    if config["model.objective.output_table"]:  # [w_i, b_i]: the output table replaces the item tower
        return ScoreLayout(int(dim), bias=True, normalized=normalized)
    cold_head = item_features and bool(config["model.item_tower.cold_head"])
    content = 0
    if item_features and float(config["model.item_tower.content_profile_weight"] or 0.0) > 0:
        content = int(config["model.item_tower.content_profile_dim"])
        if content_terms is not None:
            content = min(content, int(content_terms))
    return ScoreLayout(int(dim), 2 if cold_head else 1, content, normalized=normalized)
