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
