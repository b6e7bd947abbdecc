"""One lineage per data source: what a run's lineage is, which run its gate compares with, which links it moves,
and that a tuning run scored on its validation data is never published (no TensorFlow)."""

import os
import shutil

import pytest

from retrieval import artifacts
from retrieval.jobs import gate, identity
from retrieval.jobs.publish import ModelDirectory


def _config(train="/data/a.csv", **extra):
    data = {"train_path": train, "test_path": "", "validation_path": "", "item_features_path": "",
            "user_features_path": "", "user_column": "user_id", "item_column": "item_id"}
    data.update(extra.pop("data", {}))
    return {"name": "two_tower", "data": data, "publish": extra}


def test_lineage_follows_the_data_source_not_its_contents(tmp_path, monkeypatch):
    a = identity.lineage_of(_config())
    assert a.name.startswith("data-") and len(a.name) == len("data-") + 12 and not a.explicit
    assert identity.lineage_of(_config()).name == a.name
    assert identity.lineage_of(_config(keep_last=3)).name == a.name  # other settings: same lineage
    assert identity.lineage_of(_config("/data/b.csv")).name != a.name
    assert identity.lineage_of(_config(data={"item_column": "track"})).name != a.name
    monkeypatch.chdir("/data") if os.path.isdir("/data") else monkeypatch.chdir(tmp_path)
    relative = identity.lineage_of(_config(os.path.relpath("/data/a.csv")))
    assert relative.name == a.name and relative.source["train_path"] == "/data/a.csv"
    named = identity.lineage_of(_config(lineage="lastfm"))
    assert named.name == "lastfm" and named.explicit


def test_a_tuning_run_scored_on_validation_data_is_unpublishable(tmp_path):
    valid, copy, test = tmp_path / "valid.txt", tmp_path / "copy.txt", tmp_path / "test.txt"
    valid.write_text("1 2 3\n")
    shutil.copy(valid, copy)
    test.write_text("1 4\n")
    same = _config(data={"test_path": str(valid), "validation_path": str(valid)})
    reason = identity.validation_scored(same, {})
    assert "data.test_path is the validation data" in reason and "never published" in reason
    digests = {str(p): identity.provenance.fingerprint([str(p)])[str(p)] for p in (valid, copy, test)}
    by_content = _config(data={"test_path": str(copy), "validation_path": str(valid)})
    assert "same contents as" in identity.validation_scored(by_content, digests)
    final = _config(data={"test_path": str(test), "validation_path": str(valid)})
    assert identity.validation_scored(final, digests) is None
    assert identity.validation_scored(_config(data={"test_path": str(test)}), digests) is None
    decision = gate.check({"recall@20": 0.9}, {}, None, ["recall@20"], 0.05, unpublishable=reason)
    assert not decision.passed and decision.reasons == [reason]


def _run(model_dir: ModelDirectory, run_id: str, lineage=None, config=None):
    """A finished run directory recording ``lineage`` in its manifest (or only a ``config.json``)."""
    paths = model_dir.run_paths(run_id)
    paths.root.mkdir(parents=True)
    if lineage is not None:
        artifacts.write_json(paths.manifest, {"run_id": run_id, "lineage": {"name": lineage}})
    if config is not None:
        artifacts.write_json(paths.config, config)
    (paths.stages).mkdir()
    artifacts.write_json(paths.stages / "gate.json", {"passed": True})


def test_another_lineage_never_replaces_production(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for run_id, lineage in [("a1", "synthetic"), ("b1", "lastfm"), ("a2", "synthetic"), ("b2", "lastfm")]:
        _run(model_dir, run_id, lineage)
    assert model_dir.published("synthetic") is None and model_dir.production_lineage() is None
    assert model_dir.publish("a1", "synthetic")  # the first lineage published claims latest
    assert not model_dir.publish("b1", "lastfm")
    assert model_dir.latest_run_id() == "a1" and model_dir.latest_run_id("lastfm") == "b1"
    assert os.readlink(tmp_path / "lineages" / "lastfm" / "latest") == os.path.join("..", "..", "b1")
    assert os.path.realpath(tmp_path / "lineages" / "lastfm" / "latest") == str(tmp_path / "b1")
    assert model_dir.published("lastfm").root == tmp_path / "b1"  # the regression reference of lastfm's next run
    assert model_dir.published("synthetic").root == tmp_path / "a1"
    assert model_dir.publish("a2", "synthetic") and model_dir.latest_run_id() == "a2"
    assert not model_dir.publish("b2", "lastfm")
    assert model_dir.latest_run_id() == "a2" and model_dir.latest_run_id("synthetic") == "a2"
    assert model_dir.published_runs() == {"a2", "b2"}


def test_retention_keeps_every_lineages_published_run(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    for i, (run_id, lineage) in enumerate([("b1", "lastfm"), ("a1", "synthetic"), ("a2", "synthetic"),
                                           ("a3", "synthetic")]):
        _run(model_dir, run_id, lineage)
        os.utime(model_dir.run_paths(run_id).stages / "gate.json", (1000 + i, 1000 + i))
    model_dir.publish("a1", "synthetic")
    model_dir.publish("b1", "lastfm")
    assert model_dir.retain(keep_last=1) == ["a2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a1", "a3", "b1", "latest", "lineages"]


def test_a_model_directory_from_before_lineages_keeps_its_production_run(tmp_path):
    model_dir = ModelDirectory(tmp_path)
    old = _config(str(tmp_path / "log.csv"))
    _run(model_dir, "old", config=old)  # manifest without a lineage: read from config.json
    artifacts.point_link(tmp_path / "latest", "old")
    lineage = identity.lineage_of(old).name
    assert model_dir.production_lineage() == lineage
    assert model_dir.published(lineage).root == tmp_path / "old"  # compared with, though it has no lineage link
    assert model_dir.published("other") is None
    _run(model_dir, "other1", "other")
    assert not model_dir.publish("other1", "other") and model_dir.latest_run_id() == "old"
    _run(model_dir, "new", lineage)
    assert model_dir.publish("new", lineage) and model_dir.latest_run_id() == "new"


@pytest.mark.parametrize("name", ["lineages"])
def test_lineages_is_not_a_run_id(name):
    from retrieval import locations
    from retrieval.errors import InputError

    with pytest.raises(InputError, match="reserved"):
        locations.check_name(name, "run_id")


def test_lineage_dir_is_what_the_server_and_recommend_read(tmp_path):
    from retrieval import locations
    from retrieval.errors import InputError

    model_dir = ModelDirectory(tmp_path)
    _run(model_dir, "b1", "lastfm")
    with pytest.raises(InputError, match="no published run of lineage 'lastfm' \\(lineages there: none\\)"):
        locations.lineage_dir(str(tmp_path), "lastfm")
    model_dir.publish("b1", "lastfm")
    source = locations.lineage_dir(str(tmp_path), "lastfm")
    assert os.path.realpath(os.path.join(source, "latest")) == str(tmp_path / "b1")
    with pytest.raises(InputError, match="lineages there: lastfm"):
        locations.lineage_dir(str(tmp_path), "ml-1m")
