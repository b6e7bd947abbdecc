"""The variants the tuning phase may try (retrieval/jobs/variants.py)."""

from configs.two_tower import get_config
from retrieval import settings
from retrieval.jobs import variants


def test_every_declared_variant_is_registered_and_changes_a_copy():
    config = get_config()
    assert tuple(variants.VARIANTS) == settings.VARIANTS
    assert variants.apply(config, None) is config
    softer = variants.apply(config, "softer")
    assert softer.model.temperature == 2 * config.model.temperature == 0.2
    assert config.model.temperature == 0.1 and softer.train == config.train  # the given config is left as it was
    assert variants.describe(config, "softer") == "softer (the temperature doubled: model.temperature=0.2)"


def test_the_self_attentive_variant_is_configs_sequential_tower_and_suits_sequences_held_in_memory():
    from configs.sequential import get_config as sequential_config
    from retrieval.data.handoff import PreparedData

    config = get_config()
    towers = variants.apply(config, "self_attention")
    assert config.model.user_tower.pooling == "mean" and towers.model.user_tower.pooling == "self_attention"
    assert towers.model.user_tower.sequence.every_position and towers.data.max_examples_per_user == 1
    assert towers.model.user_tower.hidden_units == () and towers.train.early_stopping_patience > 0
    shipped = sequential_config()  # the same tower on its fixed schedule, which the variant early-stops
    assert shipped.model == towers.model and shipped.data == towers.data
    assert towers.train.epochs == shipped.train.epochs == variants.SEQUENCE_EPOCHS
    assert (shipped.train.early_stopping_patience, shipped.train.variants) == (0, ())
    towers.seed = 7
    assert towers.model.seed == towers.train.seed == 7 and config.model.seed == 42  # references kept in the copy
    unsuited = variants.VARIANTS["self_attention"].unsuited
    assert unsuited(config, PreparedData("time", "next_item")) is None
    assert "sets" in unsuited(config, PreparedData("none", "set"))
    assert "streamed" in unsuited(config, PreparedData("time", "next_item", streamed=True))
    assert variants.VARIANTS["softer"].unsuited(config, PreparedData("none", "set")) is None


def test_the_self_attentive_variant_mixes_uniform_negatives_into_the_in_batch_softmax_of_large_catalogues():
    from retrieval.data.handoff import PreparedData

    config = get_config()
    assert config.model.objective.name == "in_batch" and config.model.objective.num_negatives == 0
    for data in (None, PreparedData("time", "next_item", items=variants.MIXED_FROM_ITEMS)):  # none: sequential.py
        towers = variants.apply(config, "self_attention", data).model.objective
        assert (towers.num_negatives, towers.sampler) == (variants.SEQUENCE_MIXED_NEGATIVES, "uniform")
    small = PreparedData("time", "next_item", items=variants.MIXED_FROM_ITEMS - 1)  # a step's targets cover it
    assert variants.apply(config, "self_attention", small).model.objective == config.model.objective
    config.model.objective.name, config.model.objective.num_negatives = "sampled_softmax", 500
    sampled = variants.apply(config, "self_attention").model.objective  # another objective keeps its negatives
    assert (sampled.num_negatives, sampled.sampler) == (500, "unigram")


def test_the_self_attentive_variant_is_final_after_a_sampled_holdout_and_refit_after_a_holdout_of_all():
    """train.sequence_holdout_users: a tuning that had every other user's last item is the final model, trained to
    the end of its schedule; after a holdout of every user's last item it early-stops and is refit, as before."""
    from retrieval.data.handoff import PreparedData

    config = get_config()

    def train(sampled):
        holdout = {"fraction": 0.1, "sampled_users": sampled}
        return variants.apply(config, "self_attention", PreparedData("time", "next_item", holdout=holdout)).train

    assert (train(True).refit, train(True).early_stopping_patience, train(True).epochs) == (False, 0, 60)
    assert train(False).refit and train(False).early_stopping_patience == 5 and config.train.refit
    assert variants.apply(config, "self_attention").train.refit  # no data known: as configured


def test_the_self_attentive_variant_is_not_tried_where_the_item_tower_reads_a_pooled_history():
    """configs/catalogue.py's content-match term and content profile pool the history's item features."""
    from configs.catalogue import get_config as catalogue_config
    from retrieval.data.handoff import PreparedData

    catalogue = catalogue_config()
    sequences = PreparedData("time", "next_item")
    assert catalogue.model.item_tower.content_match and "self_attention" in catalogue.train.variants
    assert variants.VARIANTS["self_attention"].unsuited(catalogue, sequences) is None  # no item features given
    catalogue.data.item_features = "genres:multi"
    assert "pooled history" in variants.VARIANTS["self_attention"].unsuited(catalogue, sequences)
    catalogue.model.item_tower.content_match, catalogue.model.item_tower.content_profile_weight = False, 0.0
    assert variants.VARIANTS["self_attention"].unsuited(catalogue, sequences) is None


def test_the_self_attentive_variant_fills_a_step_with_about_the_same_positions_whatever_the_history_length():
    """Every position is a target scored against all the step's targets: long histories get fewer users a step."""
    from retrieval.data.handoff import PreparedData

    config = get_config()  # max_history 50: at most 51 target positions a user

    def batch(items_per_user):
        return variants.apply(config, "self_attention", PreparedData("time", "next_item",
                                                                     items_per_user=items_per_user)).train.batch_size

    assert batch(None) == variants.apply(config, "self_attention").train.batch_size == 256  # configs/sequential.py's
    assert batch(7.0) == 256  # Amazon Beauty's short histories: capped at 256 users
    assert batch(48.8) == round(variants.POSITIONS_PER_STEP / 48.8) == 42  # the bundled log
    assert batch(400.0) == batch(51.0) == round(variants.POSITIONS_PER_STEP / 51)  # past max_history + 1: the cap
    assert "train.batch_size=42" in variants.describe(config, "self_attention",
                                                      PreparedData("time", "next_item", items_per_user=48.8))


def test_prepared_data_reads_the_mean_history_from_the_summary_and_streaming_from_the_examples_manifest(tmp_path):
    from retrieval import artifacts
    from retrieval.data import examples, prepare
    from retrieval.data.handoff import PreparedData

    paths = artifacts.RunPaths(tmp_path)
    summary = {"users": 3000, "train_interactions": 146538, "examples": {"kind": "set", "streamed": False}}
    assert PreparedData.read(summary, paths).items_per_user == 146538 / 3000
    assert PreparedData.read({}, paths).items_per_user is None
    assert not PreparedData.read(summary, paths).streamed  # no examples written: nothing streamed
    prepare.examples_dir(paths).mkdir(parents=True)
    artifacts.write_json(prepare.examples_dir(paths) / examples.MANIFEST, {"kind": "set", "streamed": True})
    assert PreparedData.read(summary, paths).streamed  # the manifest's word, not the stage summary's
