"""Up-front validation of a training run: every config key has a rule and rejects bad values, cross-key checks,
gate metric names, run ids, output directories, and the exit code of the command line (two subprocesses)."""

import copy
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval import cli, locations
from retrieval.config_keys import MAX_ITEMS, Rule
from retrieval.data import validate
from retrieval.errors import InputError
from retrieval.evaluation import csr as csr_lib
from retrieval.evaluation import evaluator
from retrieval.jobs import config_checks

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("two_tower", "youtube_dnn", "item2vec", "catalogue", "sequential")


def shipped(name: str) -> dict:
    return importlib.import_module(f"configs.{name}").get_config().to_dict()


def every_key() -> list[tuple[str, str]]:
    """(config, key) for every leaf key of every shipped config, each key once."""
    seen = {}
    for name in CONFIGS:
        for key, _ in config_checks.flatten(shipped(name)):
            seen.setdefault(key, name)
    return sorted((name, key) for key, name in seen.items())


def with_value(config: dict, key: str, value) -> dict:
    config = copy.deepcopy(config)
    node = config
    *parents, leaf = key.split(".")
    for parent in parents:
        node = node[parent]
    node[leaf] = value
    return config


def bad_values(rule: Rule) -> list:
    """A wrong type for the rule's kind, then values of the right type that break its range, choices or pattern."""
    wrong_type = {"int": "1", "float": "0.5", "bool": 1, "str": 1, "ints": "10,20", "strs": "recall@20"}[rule.kind]
    values = [wrong_type]
    if rule.kind == "int":
        values += [rule.low - 1] if rule.low is not None else []
        values += [rule.high + 1] if rule.high is not None else []
        values.append(True)
    elif rule.kind == "float":
        values += [float("nan"), float("inf")]
        values += [rule.low if rule.low_open else rule.low - 1e-3] if rule.low is not None else []
        values += [rule.high if rule.high_open else rule.high + 1e-3] if rule.high is not None else []
    elif rule.kind == "str":
        values += ["bogus"] if rule.choices else []
        values += ["../x y:z"] if rule.pattern else []
        values += [""] if rule.nonempty else []
    elif rule.kind == "ints":
        values += [(0,) if rule.low == 1 else (rule.low - 1,)] if rule.low is not None else []
        values += [(rule.high + 1,)] if rule.high is not None else []
        values += [()] if rule.nonempty else []
        values += [(1.5,), (1,) * (MAX_ITEMS + 1)]
    elif rule.kind == "strs":
        values += [("bogus",)] if rule.choices else []
        values += [(1,), (rule.choices or ("x",))[:1] * (MAX_ITEMS + 1)]
    return values


@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_key_has_a_rule_and_the_defaults_pass(name):
    config = shipped(name)
    missing = [key for key, _ in config_checks.flatten(config) if key not in config_checks.RULES]
    assert not missing, f"add a rule to retrieval/jobs/config_checks.py RULES for {missing}"
    assert config_checks.config_problems(config) == []


@pytest.mark.parametrize("name", CONFIGS)
def test_the_top_level_seed_on_the_command_line_reseeds_every_section(name):
    """--config.seed=N (set as config_flags sets an override) reaches the model's, the trainer's (and Item2Vec's)
    seeds: they reference it."""
    from ml_collections.config_flags import config_path

    config = importlib.import_module(f"configs.{name}").get_config()
    config_path.set_value("seed", config, 7)
    seeds = {key: value for key, value in config_checks.flatten(config.to_dict()) if key.split(".")[-1] == "seed"}
    assert len(seeds) >= 2 and set(seeds.values()) == {7}, seeds


@pytest.mark.parametrize("name,key", every_key())
def test_every_key_rejects_bad_values_naming_the_key(name, key):
    config = shipped(name)
    for value in bad_values(config_checks.RULES[key]):
        with pytest.raises(InputError, match=rf"config\.{key}\b.*must be") as caught:
            config_checks.validate_config(with_value(config, key, value))
        assert "\n" not in str(caught.value)


def test_every_number_has_an_upper_bound():
    """A value that runs away (10^9 examples per batch, 10^6 epochs) is refused before any work, whatever the key."""
    unbounded = [key for key, rule in config_checks.RULES.items() if rule.kind in ("int", "float", "ints")
                 and rule.high is None]
    assert not unbounded, f"give these keys an upper bound in retrieval/jobs/config_checks.py RULES: {unbounded}"


@pytest.mark.parametrize("key,value", [("model.embedding_dim", 10**6), ("model.max_history", 10**7),
                                       ("train.epochs", 10**6), ("train.batch_size", 10**9),
                                       ("data.num_shards", 10**7), ("eval.bootstrap", 10**8),
                                       ("data.engine_workers", 10**5), ("eval.ks", (10, 10**9))])
def test_runaway_values_of_the_reported_keys_are_refused(key, value):
    with pytest.raises(InputError, match=rf"config\.{key}\b.*must be .*(in \[|<=)"):
        config_checks.validate_config(with_value(shipped("two_tower"), key, value))


def test_settings_whose_memory_exceeds_the_machine_are_refused(monkeypatch):
    config = shipped("two_tower")
    monkeypatch.setattr(config_checks, "physical_memory_bytes", lambda: 64 << 30)
    config_checks.validate_config(with_value(config, "train.batch_size", 65536))  # 17.6 GiB for one step fit in 64...
    monkeypatch.setattr(config_checks, "physical_memory_bytes", lambda: 8 << 30)
    with pytest.raises(InputError, match=r"config\.train\.batch_size.*one training step .*65536 x 65536 logits.*"
                                         r"needs at least 17\.6 GiB, more than this machine's 8\.0 GiB"):
        config_checks.validate_config(with_value(config, "train.batch_size", 65536))  # ...not in 8
    with pytest.raises(InputError, match=r"config\.data\.shuffle_buffer.*shuffle buffer"):
        config_checks.validate_config(with_value(config, "data.shuffle_buffer", 40_000_000))
    with pytest.raises(InputError, match=r"config\.model\.objective\.estimator_buckets.*frequency estimator"):
        config_checks.validate_config(with_value(with_value(config, "model.objective.estimator_buckets", 1 << 28),
                                              "model.objective.estimator_hashes", 8))
    monkeypatch.setattr(config_checks, "physical_memory_bytes", lambda: 0)  # unknown: only the absolute caps apply
    config_checks.validate_config(with_value(config, "data.shuffle_buffer", 40_000_000))


def test_embedding_tables_that_exceed_the_machine_are_refused_once_the_catalogue_is_known(monkeypatch):
    config = shipped("two_tower")  # 128-d item table, a separate 128-d history table, Adam: 2 slots
    assert config_checks.table_bytes(dict(config_checks.flatten(config)), 1000, 50) == 4 * 1000 * 256 * 3
    monkeypatch.setattr(config_checks, "physical_memory_bytes", lambda: 8 << 30)
    config_checks.check_tables(config, 1_000_000, 10**6)  # 3.1 GB
    with pytest.raises(InputError, match=r"config\.model\.embedding_dim.*3000000 items and 5 users need at least 8\.6 "
                                         r"GiB with their optimizer slots, more than this machine's 8\.0 GiB"):
        config_checks.check_tables(config, 3_000_000, 5)
    config_checks.check_tables(with_value(config, "train.strategy", "parameter_server"), 3_000_000, 5)  # on the ps
    with pytest.raises(InputError, match=r"config\.item2vec\.dim"):
        config_checks.check_tables(shipped("item2vec"), 10**8, 5)


def test_more_workers_than_the_cores_can_run_are_refused(monkeypatch):
    monkeypatch.setattr(config_checks.os, "cpu_count", lambda: 2)
    config = shipped("two_tower")
    config_checks.validate_config(with_value(config, "data.engine_workers", 8))
    with pytest.raises(InputError, match=r"config\.data\.engine_workers.*9 is more than this machine's 2 cores"):
        config_checks.validate_config(with_value(config, "data.engine_workers", 9))
    remote = with_value(config, "data.engine_address", "tcp://10.0.0.5:8786")
    config_checks.validate_config(with_value(remote, "data.engine_workers", 9))  # a remote cluster's workers
    with pytest.raises(InputError, match=r"config\.item2vec\.threads.*more than this machine's 2 cores"):
        config_checks.validate_config(with_value(shipped("item2vec"), "item2vec.threads", 9))


def test_a_key_without_a_rule_is_reported():
    config = with_value(shipped("two_tower"), "train.foo", 1)
    with pytest.raises(InputError, match=r"config\.train\.foo.*unknown key"):
        config_checks.validate_config(config)


def test_every_bad_key_is_reported_in_one_line():
    config = shipped("two_tower")
    for key, value in {"train.epochs": 0, "train.batch_size": -5, "train.learning_rate": float("nan"),
                       "model.max_history": 0, "data.temporal_quantile": 1.5, "index.recall_k": 0}.items():
        config = with_value(config, key, value)
    message = str(pytest.raises(InputError, config_checks.validate_config, config).value)
    for key in ("train.epochs", "train.batch_size", "train.learning_rate", "model.max_history",
                "data.temporal_quantile", "index.recall_k"):
        assert f"config.{key}:" in message
    assert "\n" not in message


def test_rules_describe_what_is_allowed():
    assert config_checks.RULES["train.epochs"].allowed() == "an integer in [1, 10000]"
    assert config_checks.RULES["train.batch_size"].allowed() == "an integer in [1, 1048576]"
    assert config_checks.RULES["data.temporal_quantile"].allowed() == "a finite number in (0, 1)"
    assert config_checks.RULES["data.order"].allowed() == "one of 'auto', 'time', 'none'"
    assert config_checks.RULES["data.order"].accepts("time") and not config_checks.RULES["data.order"].accepts("random")
    assert config_checks.RULES["eval.baselines"].accepts(()) and not config_checks.RULES["eval.ks"].accepts(())


@pytest.mark.parametrize("changes,key,message", [
    ({"data.split": "files"}, "data.test_path", "needs a test file"),
    ({"data.split": "temporal", "data.timestamp_column": ""}, "data.timestamp_column", "needs a timestamp"),
    ({"data.item_features": "genres:multi"}, "data.item_features", "without a table"),
    ({"data.user_features": "age:numeric,segment:categorical"}, "data.user_features", "without a table"),
    ({"data.train_path": "/nonexistent/log.csv"}, "data.train_path", "does not exist"),
    ({"data.test_path": "/nonexistent/test.csv"}, "data.test_path", "does not exist"),
    ({"model.objective.name": "sampled_softmax", "model.objective.num_negatives": 0},
     "model.objective.num_negatives", "sampled negatives needs at least 1"),
    ({"model.objective.name": "nce", "model.objective.negatives": "sampled", "model.objective.num_negatives": 0},
     "model.objective.num_negatives", "nce with sampled negatives needs at least 1"),
    ({"model.objective.output_table": True}, "model.objective.output_table", "needs sampled negatives"),
    ({"gate.floors": "recal@20=0.1"}, "gate.floors", "unknown metric 'recal@20'"),
    ({"gate.floors": "recall@20=nan"}, "gate.floors", "finite"),
    ({"gate.floors": "recall@20=high"}, "gate.floors", "not a number"),
    ({"gate.compare": ("ndcg@30",)}, "gate.compare", "unknown metric 'ndcg@30'.*k among eval.ks"),
    ({"eval.ks": (10, 50), "gate.floors": ""}, "gate.compare", "unknown metric 'recall@20'"),
    ({"eval.bootstrap": 0, "gate.floors": "recall@20_ci_low=0.01"}, "gate.floors", "unknown metric"),
    ({"model_type": "item2vec"}, "model_type", "configs/item2vec.py"),
    ({"eval.baselines": ("random",)}, "eval.baselines", "min_lift_over_popular needs the 'most_popular' baseline"),
    ({"gate.compare": ()}, "gate.compare", "min_lift_over_popular compares its first metric"),
])
def test_cross_key_checks(changes, key, message):
    config = shipped("two_tower")
    for changed, value in changes.items():
        config = with_value(config, changed, value)
    with pytest.raises(InputError, match=rf"config\.{key}\b.*{message}"):
        config_checks.validate_config(config)


def test_lift_check_off_needs_no_most_popular_baseline():
    config = with_value(shipped("two_tower"), "gate.min_lift_over_popular", -1.0)
    config_checks.validate_config(with_value(with_value(config, "eval.baselines", ()), "gate.compare", ()))


def test_item2vec_group_must_divide_the_batch():
    config = with_value(shipped("item2vec"), "item2vec.negative_group", 100)
    with pytest.raises(InputError, match=r"config\.item2vec\.negative_group.*must divide item2vec\.batch_size"):
        config_checks.validate_config(config)


def test_gate_metrics_are_exactly_what_the_evaluation_reports():
    rng = np.random.default_rng(0)
    n_users, n_items = 6, 12
    train = csr_lib.from_pairs(rng.integers(0, n_users, 20), rng.integers(2, n_items, 20), n_users)
    test = csr_lib.from_pairs(np.arange(n_users), rng.integers(2, n_items, n_users), n_users)
    for bootstrap in (0, 20):
        metrics = evaluator.evaluate(rng.normal(size=(n_users, 4)), rng.normal(size=(n_items, 4)), train, test,
                                     ks=(2, 5), baselines=(), n_bootstrap=bootstrap)
        gateable = {k for k, v in metrics.items() if isinstance(v, (int, float)) and "/" not in k}
        assert config_checks.evaluation_metrics((2, 5), bootstrap) == gateable


def _log(path: Path, header: str) -> str:
    path.write_text(f"{header}\nu1,i1,1\n")
    return str(path)


def test_column_names_are_checked_in_the_header(tmp_path):
    config = shipped("two_tower")
    with pytest.raises(InputError, match=r"config\.data\.item_column.*has no column\(s\) \['item_id'\]; its columns are "
                                         r"\['user_id', 'item', 'timestamp'\]"):
        config_checks.validate_config(with_value(config, "data.train_path", _log(tmp_path / "a.csv", "user_id,item,timestamp")))
    (tmp_path / "bom.csv").write_text("\ufeffuser_id,item_id\nu1,i1\n", encoding="utf-8")  # as Excel writes it
    untimed = with_value(config, "data.timestamp_column", "")  # the user says the log has no time
    config_checks.validate_config(with_value(untimed, "data.train_path", str(tmp_path / "bom.csv")))
    with pytest.raises(InputError, match=r"config\.data\.timestamp_column.*no column\(s\) \['timestamp'\]"):
        config_checks.validate_config(with_value(config, "data.train_path", str(tmp_path / "bom.csv")))
    renamed = with_value(config, "data.item_column", "item")
    config_checks.validate_config(with_value(renamed, "data.train_path", _log(tmp_path / "a.csv", "user_id,item,timestamp")))
    with pytest.raises(InputError, match=r"config\.data\.train_path.*duplicate column name\(s\) \['item_id'\]"):
        config_checks.validate_config(with_value(config, "data.train_path", _log(tmp_path / "d.csv", "user_id,item_id,item_id")))
    temporal = with_value(with_value(config, "data.split", "temporal"), "data.train_path",
                          _log(tmp_path / "n.csv", "user_id,item_id,when"))
    with pytest.raises(InputError, match=r"config\.data\.timestamp_column.*\['timestamp'\]"):
        config_checks.validate_config(temporal)
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"user_id": ["u"], "itemid": ["i"]}).to_parquet(tmp_path / "log.parquet")
    with pytest.raises(InputError, match=r"config\.data\.item_column.*log\.parquet has no column"):
        config_checks.validate_config(with_value(config, "data.train_path", str(tmp_path / "log.parquet")))
    features = with_value(with_value(config, "data.item_features_path", _log(tmp_path / "f.csv", "item_id,genre,x")),
                          "data.item_features", "genres:multi")
    with pytest.raises(InputError, match=r"config\.data\.item_features.*\['genres'\]"):
        config_checks.validate_config(features)


@pytest.mark.parametrize("run_id", ["../../x", "a/b", "latest", "", ".hidden", "a..b", "x" * 129, "a b", None])
def test_bad_run_ids_are_rejected(run_id):
    with pytest.raises(InputError, match="run_id"):
        locations.check_name(run_id, "run_id")


@pytest.mark.parametrize("run_id", ["20260101T000000", "exp-1.2_b", "A", "x" * 128])
def test_good_run_ids_pass(run_id):
    locations.check_name(run_id, "run_id")


def test_output_dir_must_be_a_usable_directory_outside_any_run(tmp_path):
    (tmp_path / "file").write_text("x")
    for bad, message in ((tmp_path / "file", "is a file"), (tmp_path / "file" / "sub", "under the file")):
        with pytest.raises(InputError, match=rf"output_dir.*{message}"):
            locations.check_output_dir(str(bad), "two_tower", "r1")
    run = tmp_path / "artifacts" / "two_tower" / "r0"
    run.mkdir(parents=True)
    for marker in locations.RUN_MARKERS:
        (run / marker).write_text("{}")
    with pytest.raises(InputError, match="inside the run directory"):
        locations.check_output_dir(str(run / "nested"), "two_tower", "r1")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "two_tower").write_text("not a directory")
    with pytest.raises(InputError, match="is a file"):
        locations.check_output_dir(str(tmp_path / "models"), "two_tower", "r1")
    locations.check_output_dir(str(tmp_path / "new" / "deep"), "two_tower", "r1")  # creatable
    locations.check_output_dir(str(tmp_path / "artifacts"), "two_tower", "r1")  # a model directory with runs


@pytest.mark.parametrize("path,kind", [("/proc/retrieval", "proc"), ("/sys/kernel/retrieval", "sysfs")])
def test_output_dir_on_a_kernel_interface_is_refused(path, kind):
    if not Path(path).parent.exists():
        pytest.skip(f"no {Path(path).parent} here")
    with pytest.raises(InputError, match=rf"output_dir.*{path} is on /\w+ \({kind}\), which cannot hold files"):
        locations.check_output_dir(path, "two_tower", "r1")


def test_output_dir_on_a_read_only_filesystem_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(locations.os, "statvfs", lambda path: type("Stat", (), {"f_flag": os.ST_RDONLY})())
    with pytest.raises(InputError, match="output_dir.*read-only filesystem"):
        locations.check_output_dir(str(tmp_path / "out"), "two_tower", "r1")


def test_a_latest_that_is_not_a_link_is_refused_before_any_work(tmp_path):
    model = tmp_path / "two_tower"
    (model / "r0").mkdir(parents=True)
    (model / "latest").symlink_to("r0")
    locations.check_output_dir(str(tmp_path), "two_tower", "r1")  # the published run's link
    (model / "latest").unlink()
    (model / "latest").mkdir()
    with pytest.raises(InputError, match=r"output_dir.*two_tower/latest is a directory, not the link to the published"):
        locations.check_output_dir(str(tmp_path), "two_tower", "r1")
    (model / "latest").rmdir()
    (model / "latest").write_text("r0")
    with pytest.raises(InputError, match="latest is a file"):
        locations.check_output_dir(str(tmp_path), "two_tower", "r1")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_output_dir_must_be_writable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(InputError, match="not writable"):
        locations.check_output_dir(str(locked / "out"), "two_tower", "r1")


def test_validate_job_checks_the_model_name_run_id_and_output_dir(tmp_path):
    config = shipped("two_tower")
    config_checks.validate_job(config, str(tmp_path), "r1")
    with pytest.raises(InputError, match="config.name"):
        config_checks.validate_job(with_value(config, "name", ".."), str(tmp_path), "r1")
    with pytest.raises(InputError, match="reserved"):
        config_checks.validate_job(config, str(tmp_path), "latest")


def test_override_errors_name_the_key():
    argv = ["train", "--config=configs/two_tower.py", "--config.train.epoch=3"]
    error = AttributeError(KeyError("'epoch'\nDid you mean \"epochs\" instead of \"epoch\"?"))
    assert cli._override_error(error, argv) == ('unknown config key config.train.epoch (Did you mean "epochs" '
                                                'instead of "epoch"?)')


@pytest.mark.parametrize("override,message", [
    ("--config.train.foo=1", "unknown config key config.train.foo"),  # refused while parsing the flags
    ("--config.train.epochs=0", "config.train.epochs': must be an integer in [1, 10000], got 0"),  # refused by validation
])
def test_command_line_exits_2_with_one_line(tmp_path, override, message):
    result = subprocess.run([sys.executable, "-m", "pipelines.train", f"--output_dir={tmp_path}", "--run_id=r1",
                             override], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == cli.EXIT_INPUT_ERROR
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "two_tower").exists()  # nothing was started


def test_a_huge_header_is_answered_at_once_in_one_bounded_line(tmp_path):
    """100k columns (the duplicate check was quadratic) and a 2.5 MB one-line JSON named .csv: seconds, one line
    of at most a few hundred characters."""
    config = shipped("two_tower")
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(f"c{i}" for i in range(100_000)) + ",c7\n" + "x\n")
    start = time.monotonic()
    with pytest.raises(InputError) as error:
        config_checks.validate_config(with_value(config, "data.train_path", str(wide)))
    assert time.monotonic() - start < 10
    assert "duplicate column name(s) ['c7']" in str(error.value) and len(str(error.value)) < 400
    many = tmp_path / "many.csv"
    many.write_text(",".join(f"c{i}" for i in range(100_000)) + "\nx\n")
    with pytest.raises(InputError, match=r"has no column\(s\) \['user_id', 'item_id', 'timestamp'\]; its columns are "
                                         r"\['c0', .* 99990 more\]") as error:
        config_checks.validate_config(with_value(config, "data.train_path", str(many)))
    assert len(str(error.value)) < 400
    json_line = tmp_path / "log.csv"
    json_line.write_text('{"rows": [' + ", ".join('{"user": "u%d", "item": "i%d"}' % (i, i) for i in range(80_000))
                         + "]}")
    start = time.monotonic()
    with pytest.raises(InputError, match=r"config\.data\.train_path.*first line is longer than 1048576 characters; "
                                         r"expected a csv header") as error:
        config_checks.validate_config(with_value(config, "data.train_path", str(json_line)))
    assert time.monotonic() - start < 10 and len(str(error.value)) < 400


@pytest.mark.parametrize("content,message", [("", "is empty: expected a header line"),
                                             ("user_id,item_id,timestamp\n", "has a header but no rows"),
                                             ("user_id,item_id,timestamp\n\n\n", "has a header but no rows")])
def test_an_empty_or_header_only_log_is_said_to_be_so(tmp_path, content, message):
    log = tmp_path / "log.csv"
    log.write_text(content)
    with pytest.raises(InputError, match=rf"config\.data\.train_path.*{message}"):
        config_checks.validate_config(with_value(shipped("two_tower"), "data.train_path", str(log)))


def test_partitions_are_bounded_by_what_the_log_can_fill(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"u{i},i{i},{i}\n" for i in range(20_000)))  # ~300 KB
    config = with_value(with_value(shipped("two_tower"), "data.train_path", str(log)), "data.streaming", "on")
    config_checks.validate_config(with_value(config, "data.num_shards", 16))
    with pytest.raises(InputError, match=r"config\.data\.num_shards.*65536 partitions of \d+ bytes of input would hold "
                                         r"less than 16 KiB each; use at most 22"):
        config_checks.validate_config(with_value(config, "data.num_shards", 65536))


def test_several_mistakes_are_reported_together():
    config = with_value(with_value(shipped("two_tower"), "train.epochs", 0), "data.item_column", "sku")
    with pytest.raises(InputError) as error:
        config_checks.validate_config(config)
    message = str(error.value)
    assert "config.train.epochs: must be an integer in [1, 10000], got 0" in message
    assert "config.data.item_column: data/interactions.csv has no column(s) ['sku']" in message
    assert "\n" not in message


def test_an_index_larger_than_the_catalogue_is_refused_before_training():
    config = with_value(shipped("two_tower"), "index.factory", "IVF4096,Flat")
    config_checks.validate_config(config)  # FAISS can build it...
    with pytest.raises(InputError, match=r"config\.index\.factory.*4096 centroids, more than the 2000 items"):
        config_checks.check_index(config, 2000)  # ...but not train it on this catalogue
    config_checks.check_index(with_value(config, "index.factory", "auto"), 10)


def test_an_item_table_sharing_little_with_the_log_warns_with_the_counts_and_one_sharing_nothing_is_refused(
        tmp_path, monkeypatch):
    """The refresh's overlap check (``validate.table_overlap``) before training, on the log as training reads it
    (issue 50)."""
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"u{i % 3},{i},{i}\n" for i in range(10)))
    config = with_value(with_value(shipped("catalogue"), "data.train_path", str(log)), "data.item_features", "")
    warnings = []
    monkeypatch.setattr(validate.logging, "warning", lambda message, *args: warnings.append(message % args))
    for name, ids, refused in (("some.csv", [0, 1, 2, 30, 31], False), ("none.csv", [30, 31], True),
                               ("all.csv", range(10), False)):
        (tmp_path / name).write_text("item_id\n" + "".join(f"{i}\n" for i in ids))
        table = with_value(config, "data.item_features_path", str(tmp_path / name))
        if refused:
            with pytest.raises(InputError, match=r"none\.csv, column 'item_id': 0 of the 10 items of the training "
                                                 r"log have a row in the item table \(0\.0%\)"):
                config_checks.validate_job(table, str(tmp_path / "out"), "r1")
        else:
            config_checks.validate_job(table, str(tmp_path / "out"), "r1")
    assert warnings == [f"{tmp_path / 'some.csv'}: 3 of the 10 items of the training log have a row in the item "
                        "table (30.0%), and 2 of its 5 rows are items the training log never saw (below 50%; items "
                        "without a row keep no features)"]
