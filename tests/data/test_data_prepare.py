"""One prepare (retrieval/data/prepare.py): every format, split and order gives the same vocabularies, test pairs,
training pairs and examples on one partition (streaming off), on 1 and 7 partitions (streaming on) and on a local
Dask cluster of 2 worker processes; degenerate logs get the same answer on every path; engine faults end cleanly."""

import json
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from configs.base import override
from configs.two_tower import get_config
from retrieval.artifacts import RunPaths
from retrieval.data import examples as examples_lib
from retrieval.data import handoff, prepare, synthetic
from retrieval.data.engine import Embedded, open_engine
from retrieval.errors import InputError

FORMATS = {"csv": "log.csv", "tsv": "log.tsv", "parquet": "log.parquet", "movielens": "u.data",
           "user_items": "log.txt"}
CASES = [(fmt, split, order) for fmt in FORMATS for split in prepare.SPLITS for order in ("time", "none")
         if not (order == "none" and split in prepare.TIME_SPLITS)]


def _write(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "tsv":
        frame.to_csv(path, index=False, sep="\t")
    elif fmt == "parquet":
        frame.to_parquet(path, index=False, row_group_size=97)
    elif fmt == "movielens":
        frame.assign(rating=4)[["user_id", "item_id", "rating", "timestamp"]].to_csv(path, sep="\t", header=False,
                                                                                     index=False)
    else:  # one line per user, items in time order
        ordered = frame.sort_values(["user_id", "timestamp"], kind="stable")
        lines = ordered.groupby("user_id", sort=False)["item_id"].apply(lambda items: " ".join(items.astype(str)))
        path.write_text("\n".join(f"{user} {items}" for user, items in lines.items()) + "\n")


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict:
    """The same synthetic log in every format: the whole log, and as train/test/validation files."""
    log, _, _ = synthetic.generate(num_users=60, num_items=40, interactions_per_user=8, num_clusters=3, seed=3)
    log = log[["user_id", "item_id", "timestamp"]].assign(user_id=pd.factorize(log["user_id"])[0] + 1,
                                                           item_id=pd.factorize(log["item_id"])[0] + 1)
    log.loc[7, "timestamp"] = log.loc[6, "timestamp"]  # a tie in time keeps file order
    last = log.sort_values("timestamp", kind="stable").groupby("user_id").cumcount(ascending=False).to_numpy()
    parts = {"train": log[last >= 2], "test": log[last == 0], "validation": log[last == 1]}
    out = {}
    for fmt, name in FORMATS.items():
        directory = tmp_path_factory.mktemp(fmt)
        _write(log, directory / name, fmt)
        files = {}
        for part, frame in parts.items():
            (directory / part).mkdir()
            files[part] = directory / part / name
            _write(frame, files[part], fmt)
        out[fmt] = {"log": directory / name, **files}
    return out


@pytest.fixture(scope="module")
def dask_engine():
    pytest.importorskip("dask.distributed")
    with open_engine("dask", workers=2) as engine:
        yield engine


def _config(logs: dict, fmt: str, split: str, order: str):
    files = logs[fmt]
    extra = {"data.format": fmt, "data.split": split, "data.order": order, "data.holdout_fraction": 0.3,
             "data.temporal_quantile": 0.8, "model.max_history": 4, "data.validation": split == "leave_last_n",
             "data.train_path": str(files["train"] if split == "files" else files["log"])}
    if split == "files":
        extra.update({"data.test_path": str(files["test"]), "data.validation_path": str(files["validation"])})
    return override(get_config(), extra)


def _prepared(config, directory: Path, shards: int, engine) -> tuple:
    summary = prepare.run(handoff.settings_of(config, directory, num_shards=shards), engine,
                          config.data.order).as_dict()
    paths = RunPaths(directory)
    tables = {name: _rows(getattr(paths, name)) for name in ("train_data", "test_data", "validation_data")}
    vocabularies = tuple(pd.read_parquet(getattr(paths, name)).to_dict("list") for name in ("item_vocab",
                                                                                              "user_vocab"))
    source = prepare.load_examples(paths, in_memory=True, max_history=4)
    if summary["examples"]["kind"] == "set":
        examples = sorted(zip(source.user.tolist(), source.label.tolist(), strict=True))
    else:
        arrays = source.arrays
        examples = sorted(zip(arrays["user"].tolist(), arrays["label"].tolist(), map(tuple, arrays["history"].tolist()),
                              strict=True))
    return {**summary, "examples": {**summary["examples"], "shards": 0, "streamed": 0}}, tables, vocabularies, examples


def _rows(path: Path):
    return sorted(map(tuple, pd.read_parquet(path).astype(str).to_numpy())) if path.exists() else None


@pytest.mark.parametrize("fmt,split,order", CASES)
def test_every_path_gives_the_same_data(logs, dask_engine, tmp_path, fmt, split, order):
    config = _config(logs, fmt, split, order)
    reference = _prepared(config, tmp_path / "memory", 1, Embedded())
    summary, tables, _, examples = reference
    assert summary["order"]["order"] == order and summary["test_interactions"] > 0 and examples
    assert tables["validation_data"] is not None if split in ("leave_last_n", "files") else True
    assert _prepared(config, tmp_path / "seven", 7, Embedded()) == reference
    assert _prepared(config, tmp_path / "dask", 7, dask_engine) == reference


def test_streamed_and_in_memory_sources_hold_the_same_examples(logs, tmp_path):
    """The shards streamed from disk and the same shards loaded into memory: the same examples, any partition count."""
    config = _config(logs, "csv", "leave_last_n", "time")
    prepare.run(handoff.settings_of(config, tmp_path, num_shards=3), Embedded(), "time")
    streamed = prepare.load_examples(RunPaths(tmp_path), in_memory=False, max_history=4)
    held = prepare.load_examples(RunPaths(tmp_path), in_memory=True, max_history=4)
    assert isinstance(held, examples_lib.NextItemExamples) and len(streamed) == len(held)
    read = examples_lib.collect(streamed.to_dataset(50, shuffle=False))
    assert sorted(read["label"].tolist()) == sorted(held.arrays["label"].tolist())


def _answer(config, directory: Path, shards: int):
    """What a path answers: the prepared counts, or the error's one line."""
    try:
        summary = prepare.run(handoff.settings_of(config, directory, num_shards=shards), Embedded(),
                              config.data.order).as_dict()
        return {k: v for k, v in summary.items() if k != "examples"}
    except InputError as e:
        return str(e)


@pytest.mark.parametrize("case", ["header_only", "one_user", "one_item", "fewer_users_than_shards", "long_id",
                                  "duplicate_header", "huge_timestamp"])
def test_degenerate_logs_get_the_same_answer_on_every_path(tmp_path, case):
    path = tmp_path / "log.csv"
    rows = "".join(f"{u},{i},{t}\n" for u, i, t in [(1, 1, 1), (1, 2, 2), (1, 3, 3), (2, 1, 1), (2, 3, 2)])
    path.write_text({
        "header_only": "user_id,item_id,timestamp\n",
        "one_user": "user_id,item_id,timestamp\n1,1,1\n1,2,2\n1,3,3\n",
        "one_item": "user_id,item_id,timestamp\n1,1,1\n1,1,2\n2,1,2\n2,1,3\n",
        "fewer_users_than_shards": "user_id,item_id,timestamp\n" + rows,
        "long_id": "user_id,item_id,timestamp\n" + rows + "3," + "x" * (5 << 20) + ",4\n",
        "duplicate_header": "user_id,item_id,item_id\n" + rows,
        "huge_timestamp": "user_id,item_id,timestamp\n" + rows + "3,2,1e30\n",
    }[case])
    config = override(get_config(), {"data.train_path": str(path)})
    answers = [_answer(config, tmp_path / str(shards), shards) for shards in (1, 7)]
    assert answers[0] == answers[1]
    if case in ("one_user", "fewer_users_than_shards"):
        assert isinstance(answers[0], dict) and answers[0]["test_interactions"] > 0
    else:
        assert isinstance(answers[0], str) and str(path) in answers[0] and "\n" not in answers[0]
    expected = {"header_only": "no interactions", "one_item": "1 item(s)", "long_id": "longer than the limit",
                "duplicate_header": "duplicate column name", "huge_timestamp": "row 5"}
    if case in expected:
        assert expected[case] in answers[0]


def test_streaming_auto_follows_the_file_size(logs):
    data = get_config().data
    data.train_path = str(logs["csv"]["log"])
    assert not prepare.streamed(data)
    data.streaming_min_mb = 0
    assert prepare.streamed(data)
    data.streaming = "off"
    assert not prepare.streamed(data)


def _silent_server() -> tuple[socket.socket, int]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (closed by the caller)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


def test_a_silent_unreachable_or_malformed_dask_address_fails_within_the_timeout():
    pytest.importorskip("dask.distributed")
    server, port = _silent_server()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    free_port = closed.getsockname()[1]
    closed.close()
    try:
        for address in (f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{free_port}", "tcp://not a host:x"):
            start = time.monotonic()
            with pytest.raises(InputError, match="data.engine_address") as error:
                with open_engine("dask", address, timeout_s=2):
                    pass
            assert time.monotonic() - start < 15, address
            assert "cannot reach the Dask scheduler" in str(error.value)
    finally:
        server.close()


def test_split_files_and_every_format_stream_in_the_job_settings(logs, tmp_path):
    """Nothing is refused under data.streaming=on: files split, user_items format, set order, Item2Vec."""
    config = override(_config(logs, "user_items", "files", "none"), {"data.streaming": "on", "data.num_shards": 4})
    settings = handoff.settings_of(config, tmp_path)
    assert settings.num_shards == 4 and [part for part, _ in settings.sources] == ["train", "test", "validation"]
    config.model_type = "item2vec"
    assert handoff.settings_of(config, tmp_path).examples == prepare.NO_EXAMPLES


def test_the_holdout_is_keyed_per_user(logs):
    """A user's random holdout does not depend on which other users are split with her."""
    from retrieval.data import readers, splits

    log = readers.read_interactions(logs["csv"]["log"])
    whole = splits.random_holdout(log, 0.3, seed=5, policy="keep").test
    users = log["user_id"].unique()[:10]
    part = splits.random_holdout(log[log["user_id"].isin(users)], 0.3, seed=5, policy="keep").test
    assert _rows_of(whole[whole["user_id"].isin(users)]) == _rows_of(part)
    other = splits.random_holdout(log, 0.3, seed=6, policy="keep").test
    assert _rows_of(other) != _rows_of(whole)


@pytest.mark.parametrize("sample", [20, 60])
def test_a_sampled_sequence_holdout_is_the_last_item_of_that_many_users_on_every_path(logs, tmp_path, sample):
    """train.sequence_holdout_users: the last training item of a seeded sample of exactly that many users (every user
    when there are no more: the log has 60), the same users on 1 and 7 partitions."""
    config = override(_config(logs, "csv", "random", "time"), {"train.sequence_holdout_users": sample,
                                                               "train.early_stopping_patience": 2})
    held = []
    for shards in (1, 7):
        summary = prepare.run(handoff.settings_of(config, tmp_path / str(shards), num_shards=shards), Embedded(),
                              "time")
        paths = RunPaths(tmp_path / str(shards))
        validation = pd.read_parquet(prepare.tuning_data(paths, "validation"))
        train = pd.read_parquet(paths.train_data)
        last = train.sort_values("timestamp", kind="stable").groupby("user_id").tail(1)
        assert validation["user_id"].is_unique and len(validation) == min(sample, train["user_id"].nunique())
        assert _rows_of(validation) == _rows_of(last[last["user_id"].isin(validation["user_id"])])
        assert summary.tuning["sampled_users"] == (sample < train["user_id"].nunique())
        held.append(_rows_of(validation))
    assert held[0] == held[1]


def _rows_of(frame: pd.DataFrame) -> list:
    return sorted(map(tuple, frame.astype(str).to_numpy()))


def test_temporal_cutoff_from_counts_is_numpy_quantile():
    rng = np.random.default_rng(0)
    from retrieval.data import splits

    for _ in range(100):
        times = rng.integers(0, 30, rng.integers(1, 60))
        fraction = rng.uniform(0.05, 0.95)
        assert splits.cutoff_of(*np.unique(times, return_counts=True), fraction) == int(
            np.quantile(times, 1 - fraction, method="higher"))


def _die(_):
    import os

    os._exit(1)


def test_a_task_that_kills_its_workers_ends_with_an_input_error(dask_engine):
    """Dask reschedules a task whose worker died; one that kills every worker it meets ends the stage cleanly."""
    with pytest.raises(InputError, match="Dask workers died"):
        dask_engine.map(_die, [0])
    assert dask_engine.map(abs, [-1, 2]) == [1, 2]  # the nannies restarted the workers: the engine still works


def test_the_catalogue_and_its_cold_items_are_the_same_on_every_path(logs, tmp_path):
    """A feature table with items nobody clicked, and a seeded cold-item holdout: the same vocabulary, parts and
    examples in memory and on 7 partitions."""
    items = pd.DataFrame({"item_id": [str(i) for i in range(1, 46)], "genre": [f"g{i % 4}" for i in range(1, 46)]})
    items.to_csv(tmp_path / "items.csv", index=False)
    config = override(_config(logs, "csv", "leave_last_n", "time"), {
        "data.item_features_path": str(tmp_path / "items.csv"), "data.item_features": "genre:categorical",
        "data.cold_item_fraction": 0.2})
    reference = _prepared(config, tmp_path / "memory", 1, Embedded())
    summary, tables, vocabularies, _ = reference
    catalogue = summary["catalogue"]
    assert catalogue["items"] == 45 and catalogue["cold"] >= 5 + 1  # 5 never in the log, and the holdout's
    ids, counts = vocabularies[0]["id"], vocabularies[0]["count"]
    cold = {item for item, count in zip(ids, counts, strict=True) if count == 0} - {"<pad>", "<oov>"}
    assert not cold & {row[1] for row in tables["train_data"]}
    assert _prepared(config, tmp_path / "seven", 7, Embedded()) == reference


def test_a_catalogue_item_below_min_item_count_keeps_its_clicks_and_is_never_cold(logs, tmp_path):
    """data.min_item_count with an item table: a listed item clicked fewer times keeps its training count (its clicks
    stay in training, so it is warm); the cold items are exactly the listed ones nobody clicked."""
    items = pd.DataFrame({"item_id": [str(i) for i in range(1, 46)], "genre": [f"g{i % 4}" for i in range(1, 46)]})
    items.to_csv(tmp_path / "items.csv", index=False)
    config = override(_config(logs, "csv", "leave_last_n", "time"), {
        "data.item_features_path": str(tmp_path / "items.csv"), "data.item_features": "genre:categorical",
        "data.min_item_count": 8})
    summary, tables, vocabularies, _ = _prepared(config, tmp_path / "run", 1, Embedded())
    clicked = pd.Series([row[1] for row in tables["train_data"]]).value_counts()
    assert (clicked < 8).sum() >= 5  # the log has items below the threshold
    counts = dict(zip(vocabularies[0]["id"][2:], vocabularies[0]["count"][2:], strict=True))
    assert {item: counts[item] for item in clicked.index} == clicked.to_dict()
    cold = {item for item, count in counts.items() if count == 0}
    assert cold == set(items["item_id"]) - set(clicked.index) and summary["catalogue"]["cold"] == len(cold)
    assert np.all(np.diff(vocabularies[0]["count"][2:len(clicked) + 2]) <= 0)  # warm items by decreasing count


def test_the_summary_counts_the_item_tables_empty_cells_and_cells_with_a_nul_byte(logs, tmp_path):
    """An empty numeric cell (its mean) and a NUL byte in a text cell (a token separator) were taken silently; the
    prepare summary counts them by column, and the NUL is a separator in the text's tokens (issue 50)."""
    items = pd.DataFrame({"item_id": [str(i) for i in range(1, 46)],
                          "title": [f"toy\x00story {i % 3}" if i < 4 else f"heat {i % 5}" for i in range(1, 46)],
                          "year": [None if i in (5, 9) else 1990 + i for i in range(1, 46)]})
    items.to_csv(tmp_path / "items.csv", index=False)
    config = override(_config(logs, "csv", "leave_last_n", "time"), {
        "data.item_features_path": str(tmp_path / "items.csv"), "data.item_features": "title:text,year:numeric"})
    summary, *_ = _prepared(config, tmp_path / "run", 1, Embedded())
    assert summary["catalogue"]["missing_cells"] == {"year": 2}
    assert summary["catalogue"]["nul_cells"] == {"title": 3}
    specs = json.loads((tmp_path / "run" / "vocab" / "item_features.json").read_text())["specs"]
    assert {"toy", "story"} <= set(next(s for s in specs if s["name"] == "title")["vocabulary"])
