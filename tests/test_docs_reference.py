"""docs/reference.md is generated (tools/config_reference.py) from the sections' key declarations and must match
them; every key of every shipped config is declared, with its rule and meaning, by its section."""

import ml_collections
import pytest

from retrieval.config_keys import Key, Section, integer
from retrieval.jobs.config_checks import RULES, flatten
from retrieval.jobs.sections import SECTIONS
from tools import config_reference


def test_reference_is_current():
    expected = config_reference.generate()
    current = config_reference.REFERENCE.read_text() if config_reference.REFERENCE.exists() else ""
    assert current == expected, ("docs/reference.md is stale (a key's declaration changed): "
                                 "run `.venv/bin/python -m tools.config_reference --write` and commit it")


def test_every_shipped_key_is_declared_once_with_a_meaning():
    declared = [section.qualified(key) for section in SECTIONS for key in section.keys]
    assert len(declared) == len(set(declared)) == len(RULES)
    for name in config_reference.shipped_configs():
        config = config_reference.importlib.import_module(f"configs.{name}").get_config()
        assert {key for key, _ in flatten(config.to_dict())} <= set(declared), name
    text = config_reference.generate()
    for key in declared:
        assert f"| `{key}` |" in text, key
    for section in SECTIONS:
        assert section.keys[0].doc, f"the first key of {section.name!r} has no meaning to share"


def test_the_page_lists_the_configs_that_override_a_default_and_shared_meanings():
    text = config_reference.generate()
    line = next(row for row in text.splitlines() if row.startswith("| `model.temperature` |"))
    assert "`0.15`" in line and "two_tower: `0.1`" in line
    line = next(row for row in text.splitlines() if row.startswith("| `data.engine_workers` |"))
    assert "See `data.engine`." in line


def test_a_section_builds_its_defaults_and_refuses_a_default_its_rule_refuses():
    section = Section("s", (Key("a", 1, integer(0, 5), "A."), Key("b.c", 2, integer(0, 5), "C.")), __name__)
    config = section.config()
    assert isinstance(config.b, ml_collections.ConfigDict) and (config.a, config.b.c) == (1, 2)
    assert section.rules() == {"s.a": integer(0, 5), "s.b.c": integer(0, 5)}
    with pytest.raises(ValueError, match="s.a: default 9"):
        Section("s", (Key("a", 9, integer(0, 5), "A."),), __name__)
    with pytest.raises(ValueError, match="twice"):
        Section("s", (Key("a", 1, integer(0, 5), "A."), Key("a", 2, integer(0, 5))), __name__)
