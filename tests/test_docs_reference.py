"""docs/reference.md is generated (retrieval.config_reference) and must match the code: the rule table, the config
defaults and the comments above them."""

from retrieval import config_reference
from retrieval.jobs.config_checks import RULES


def test_reference_is_current():
    expected = config_reference.generate()
    current = config_reference.REFERENCE.read_text() if config_reference.REFERENCE.exists() else ""
    assert current == expected, ("docs/reference.md is stale (a config key, default, comment or rule changed): "
                                 "run `.venv/bin/python -m retrieval.config_reference --write` and commit it")


def test_every_rule_and_shipped_key_is_documented():
    text = config_reference.generate()
    for key in RULES:
        assert f"| `{key}` |" in text, key
    assert "(undocumented)" not in text, "a config key has no comment above its assignment"
    assert "**no rule**" not in text, "a config key has no rule in retrieval/jobs/config_checks.py RULES"


def test_definition_is_the_owner_not_the_override():
    """The owner's comment and default describe a key; a shipped config that overrides it is listed beside it."""
    text = config_reference.generate()
    line = next(row for row in text.splitlines() if row.startswith("| `model.temperature` |"))
    assert "`0.15`" in line and "two_tower: `0.1`" in line
    line = next(row for row in text.splitlines() if row.startswith("| `data.engine_workers` |"))
    assert "See `data.engine`." in line
