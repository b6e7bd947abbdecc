"""One validation pass over a training run's configuration, run id and output directory, before any work.

Every key of the configuration must be declared, with its rule, by its section (:data:`RULES` gathers them from
``retrieval.jobs.sections.SECTIONS``; type, range, choices: ``retrieval.config_keys``); an undeclared key is an
error, so a key added to a config file cannot skip validation (``tests/test_validation.py`` walks every key of every
shipped config). This module holds only what no single key can say: the cross-key checks (:data:`CROSS_CHECKS`):
the rules declared beside their keys (``Key.needs``: objective combinations, the item tower's terms, Item2Vec's
batch / group divisibility), a split that needs a file or a timestamp, features declared without their
table, input files that must exist, gate metrics
that the evaluation will actually report, the most-popular baseline that the gate's lift check needs, the named
columns in the input files' headers, and settings whose memory alone exceeds the machine's. Every problem found is
reported, one line, through ``InputError``. Nothing here imports TensorFlow (the choices come from
``retrieval.settings``), so a mistake answers in about a second.

The checks read a config through :class:`Settled`: every declared key, the config's value or else the declared
default, so no check keeps a default of its own (a config built by hand may leave keys out).

Adding a key: declare it in its section (its default, rule and meaning, one :class:`~retrieval.config_keys.Key`),
with what it needs of other keys beside it (``Key.needs``, checked by :func:`_declared_needs`).
"""

from __future__ import annotations

import collections
import csv
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from retrieval import locations, settings
from retrieval.config_keys import Rule, flatten
from retrieval.data import catalogue, readers, splits, validate
from retrieval.errors import InputError, shown, shown_list
from retrieval.evaluation import metrics
from retrieval.jobs import gate, identity, sections
from retrieval.jobs.sections import Settled
from retrieval.models import config as model_config
from retrieval.models.layout import score_layout

# What each key accepts: the rules declared with the keys, section by section (retrieval/jobs/sections.py).
RULES: dict[str, Rule] = {name: rule for section in sections.SECTIONS for name, rule in section.rules().items()}

Problem = tuple[str, str]  # (key, what is wrong and what is allowed)


def evaluation_metrics(ks, bootstrap: int) -> set[str]:
    """The flat metric names a run's evaluation reports for the model (what the gate can read): every accuracy,
    popularity and coverage metric at each k, and the bootstrap interval bounds of the headline metrics."""
    per_k = (*metrics.ACCURACY_METRICS, *metrics.POPULARITY_METRICS, "coverage")
    reported = {f"{name}@{k}" for name in per_k for k in ks}
    if bootstrap:
        reported |= {f"{name}@{k}_ci_{side}" for name in settings.CI_METRICS for k in ks for side in ("low", "high")}
    return reported


def _gate_metrics(c: Mapping[str, Any]) -> Iterator[Problem]:
    if "gate.floors" not in c and "gate.compare" not in c:
        return
    ks, bootstrap = c["eval.ks"], c["eval.bootstrap"]
    known = evaluation_metrics(ks, bootstrap)
    expected = (f"expected <metric>@<k> with metric among {', '.join(metrics.ACCURACY_METRICS)}, "
                f"{', '.join(metrics.POPULARITY_METRICS)}, coverage and k among eval.ks {tuple(ks)}"
                + (" (or recall/ndcg@k_ci_low/_ci_high)" if bootstrap else ""))
    floors = [part.split("=") for part in c["gate.floors"].split(",") if part.strip()]
    for name, value in floors:
        try:
            floor = float(value)
        except ValueError:
            yield "gate.floors", f"floor {value.strip()!r} of {name.strip()} is not a number"
            continue
        if not math.isfinite(floor):
            yield "gate.floors", f"floor {value.strip()!r} of {name.strip()} must be a finite number"
        if name.strip() not in known:
            yield "gate.floors", f"unknown metric {name.strip()!r}: {expected}"
    for name in c["gate.compare"]:
        if name not in known:
            yield "gate.compare", f"unknown metric {name!r}: {expected}"


def _gate_lift(c: Mapping[str, Any]) -> Iterator[Problem]:
    if c["gate.min_lift_over_popular"] <= gate.OFF:
        return
    off = "or turn the check off with gate.min_lift_over_popular=-1"
    if gate.POPULAR not in c["eval.baselines"]:
        yield "eval.baselines", f"gate.min_lift_over_popular needs the {gate.POPULAR!r} baseline: add it, {off}"
    if not c["gate.compare"]:
        yield "gate.compare", f"gate.min_lift_over_popular compares its first metric with most-popular: name one, {off}"


def _data(c: Mapping[str, Any]) -> Iterator[Problem]:
    split = c["data.split"]
    needs = splits.SPLITS[split].needs if split in splits.SPLITS else ()
    if needs and not c[needs[0]]:
        yield needs[0], f"split {split!r} needs {needs[1]}"
    for which in ("item", "user"):
        if c[f"data.{which}_features"] and not c[f"data.{which}_features_path"]:
            yield f"data.{which}_features", f"features declared without a table: set data.{which}_features_path"
    if c["data.cold_item_fraction"] > 0 and not (c["data.item_features_path"]
                                                 and c["data.catalogue"] == "item_features"
                                                 and c["model_type"] == "two_tower"):
        yield "data.cold_item_fraction", ("cold items are embedded from their features: it needs a two-tower model, "
                                          "data.item_features_path and data.catalogue='item_features'")
    for key in (f"data.{name}" for name in identity.INPUT_KEYS):
        if c[key]:
            try:
                locations.check_input(c[key], key, kind="any")
            except InputError as e:
                yield key, e.message


MAX_HEADER_CHARS = 1 << 20  # a header line longer than this is no header (e.g. a one-line JSON file named .csv)


def _header(path: str, format: str) -> Optional[list[str]]:
    """The column names of a csv/tsv/parquet file from its header alone (no data row is read), or None when the
    format has no header or the header cannot be read (the reader then reports the problem with its row). A first
    line longer than :data:`MAX_HEADER_CHARS` is an ``InputError``: reading on would take minutes."""
    try:
        format = readers.guess_format(path) if format == "auto" else format
        if format == "parquet":
            return list(pq.read_schema(path).names)
        if format not in ("csv", "tsv"):
            return None
        with open(path, newline="", encoding="utf-8-sig") as handle:  # a byte-order mark is no name
            line = handle.readline(MAX_HEADER_CHARS + 1)
        if len(line) <= MAX_HEADER_CHARS:
            return next(csv.reader([line], delimiter="," if format == "csv" else "\t"), [])
    except (InputError, OSError, UnicodeDecodeError, csv.Error, pa.ArrowException):
        return None
    raise InputError(f"{path}: the first line is longer than {MAX_HEADER_CHARS} characters; expected a {format} "
                     f"header of column names (is this a {format} file?)")


def _rowless(path: str, format: str) -> bool:
    """Whether a csv/tsv/parquet file whose header was read holds no data row (read: its second line, or the
    Parquet footer's row count)."""
    try:
        if format == "parquet":
            return pq.ParquetFile(path).metadata.num_rows == 0
        with open(path, encoding="utf-8-sig", errors="replace") as handle:
            handle.readline(MAX_HEADER_CHARS + 1)
            return not any(line.strip() for line in handle)  # stops at the first data row
    except (OSError, pa.ArrowException):
        return False


def _columns(c: Mapping[str, Any]) -> Iterator[Problem]:
    """The named columns are in the files' headers (read before anything else, so a typo answers at once)."""
    user, item, timestamp = c["data.user_column"], c["data.item_column"], c["data.timestamp_column"]
    named = [user, item] + ([timestamp] if timestamp else [])  # a named timestamp column must exist: without it
    logs = {"train_path": named, "test_path": named, "validation_path": named}  # the split would be in file order
    tables = {"item_features_path": (item, "data.item_features"), "user_features_path": (user, "data.user_features")}
    for name in identity.INPUT_KEYS:
        path = c[f"data.{name}"]
        if not path or not Path(path).is_file():
            continue
        if name in tables:
            id_column, spec = tables[name]
            required = [id_column] + [part.split(":")[0].strip() for part in c[spec].split(",") if part.strip()]
            fmt = "auto"
        else:
            required, fmt = logs[name], c["data.format"]
        try:
            header = _header(path, fmt)
        except InputError as e:
            yield f"data.{name}", e.message
            continue
        if header is None:
            continue
        if not header or _rowless(path, fmt if fmt != "auto" else readers.guess_format(path)):
            yield f"data.{name}", (f"{path} is empty: expected a header line of column names" if not header
                                   else f"{path} has a header but no rows")
            continue
        repeated = sorted(column for column, count in collections.Counter(header).items() if count > 1)
        if repeated:
            yield f"data.{name}", (f"{path}: duplicate column name(s) {shown_list(repeated)} in the header; every "
                                   f"column needs its own name")
            continue
        names = set(header)
        missing = [column for column in required if column not in names]
        if missing:
            named_by = {user: "data.user_column", item: "data.item_column", timestamp: "data.timestamp_column"}
            key = named_by.get(missing[0]) or tables[name][1]  # a log misses a named column, a table a feature
            hint = " (or data.timestamp_column='' when the log has no time)" if key == "data.timestamp_column" else ""
            yield key, f"{path} has no column(s) {missing}; its columns are {shown_list(header)}{hint}"


MIN_SHARD_BYTES = 16 << 10  # input bytes a partition holds at least: more partitions only multiply files and tasks


def _shards(c: Mapping[str, Any]) -> Iterator[Problem]:
    """``data.num_shards`` no larger than the input files can fill (:data:`MIN_SHARD_BYTES` each): beyond that the
    partitions are near-empty files by the ten thousand."""
    if c["data.num_shards"] <= 1:
        return
    paths = [c[f"data.{name}"] for name in ("train_path", "test_path", "validation_path") if c[f"data.{name}"]]
    try:
        size = sum(sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file()) if Path(p).is_dir()
                   else Path(p).stat().st_size for p in paths)
    except OSError:
        return
    streaming = c["data.streaming"]
    if streaming == "off" or (streaming == "auto" and size < c["data.streaming_min_mb"] * (1 << 20)):
        return  # one partition: num_shards is not used
    most = max(1, size // MIN_SHARD_BYTES)
    if c["data.num_shards"] > most:
        yield "data.num_shards", (f"{c['data.num_shards']} partitions of {size} bytes of input would hold less than "
                                  f"{MIN_SHARD_BYTES // 1024} KiB each; use at most {most}")


def _index_factory(c: Settled, content_terms: Optional[int] = None) -> Iterator[Problem]:
    """``index.factory`` is a string FAISS can build at the exported vectors' width (``layout.score_layout``; a named
    factory, ``auto``, always is): checked here, not after the whole training."""
    factory, dimension = str(c["index.factory"]).strip(), score_layout(c, content_terms).dimension
    if factory.lower() == "auto":  # the default, without loading FAISS (index.factory.NAMED)
        return
    import faiss  # about a second, only for an explicit factory

    from retrieval.index.factory import NAMED

    if factory.lower() in NAMED:
        return

    try:
        faiss.index_factory(int(dimension), factory)
    except RuntimeError as e:
        reason = " ".join(str(e).split()).rpartition("Error: ")[2]  # FAISS's own words, without its C++ location
        yield "index.factory", f"FAISS cannot build {shown(factory)} for vectors of dimension {dimension}: {reason}"


def check_index(config: Mapping, n_items: int, content_terms: Optional[int] = None) -> None:
    """Raises ``InputError`` when ``index.factory`` trains a codebook larger than the catalogue of ``n_items``, or,
    given the catalogue's ``content_terms`` (which cap the content profile's width), cannot be built at the exported
    width: both known once the data is prepared, so checked then, before training. Without ``content_terms`` the
    width is the one the up-front check (``_index_factory``) already read."""
    from retrieval.index.factory import NAMED, codebook_size

    if content_terms is not None:
        for key, message in _index_factory(Settled(config), content_terms):
            raise InputError(message, field=f"config.{key}")
    factory = str(config["index"]["factory"]).strip()
    if factory.lower() not in NAMED and codebook_size(factory) > n_items:
        raise InputError(f"{factory!r} trains {codebook_size(factory)} centroids, more than the {n_items} items of the "
                         f"catalogue; use fewer IVF lists, fewer PQ bits, or Flat", field="config.index.factory")


def _model(c: Settled) -> Iterator[Problem]:
    model_type = c["model_type"]
    needed = {"two_tower": ("model.embedding_dim", "train.epochs"), "item2vec": ("item2vec.epochs",)}
    for key in needed.get(model_type, ()):
        if key not in c.given:
            yield "model_type", f"{model_type!r} needs config.{key} (start from configs/{model_type}.py)"


def _declared_needs(c: Settled) -> Iterator[Problem]:
    """The cross-key rules declared beside their keys (``config_keys.Needs``), every section's."""
    for section in sections.SECTIONS:
        for key in section.keys:
            for need in key.needs:
                name = section.qualified(key)
                if (problem := need.problem(c[name], c)) is not None:
                    yield name, problem


def physical_memory_bytes() -> int:
    """This machine's physical memory (0 when the OS does not say): what a run can use at most."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _step_bytes(c: Mapping[str, Any]) -> tuple[int, str]:
    """A lower bound of one two-tower training step's memory, and how it was counted: the float32 history
    embeddings of the batch and its logits ([batch, batch + negatives] in-batch, [batch, negatives] sampled)."""
    batch, history = c["train.batch_size"], c["model.max_history"]
    width = c["model.item_tower.id_embedding_dim"]
    if not c["model.user_tower.share_item_embeddings"]:
        width = c["model.user_tower.history_embedding_dim"]
    name, negatives = c["model.objective.name"], c["model.objective.num_negatives"]
    sampled = model_config.samples_negatives(name, c["model.objective.negatives"])
    columns = max(negatives, 1) if sampled or name.startswith("full_") else batch + negatives
    return 4 * batch * (history * width + columns), (f"{batch} x {history} history embeddings of width {width} and "
                                                       f"{batch} x {columns} logits, float32")


def machine_workers() -> int:
    """The most local worker processes or threads a run may start here: 4 per core (at least 8)."""
    return max(8, 4 * (os.cpu_count() or 1))


def _machine(c: Mapping[str, Any]) -> Iterator[Problem]:
    """Local processes and threads beyond what this machine's cores can run (a remote Dask cluster is not counted)."""
    most = machine_workers()
    local = {"item2vec.threads": True, "data.engine_workers": not c["data.engine_address"]}
    for key, counted in local.items():
        if counted and c[key] > most:
            yield key, f"{c[key]} is more than this machine's {os.cpu_count()} cores can run (at most {most})"


def _memory(c: Mapping[str, Any]) -> Iterator[Problem]:
    """Settings whose memory alone, counted from below, exceeds this machine's physical memory (the sizes of the
    embedding tables depend on the catalogue and are not known before the data is read)."""
    available = physical_memory_bytes()
    if not available:
        return
    needs = []
    if "train.batch_size" in c and "model.max_history" in c:
        step, how = _step_bytes(c)
        needs.append(("train.batch_size", step, f"one training step ({how})", "train.batch_size or model.max_history"))
    if "data.shuffle_buffer" in c:
        example = 4 * (c["model.max_history"] + 4)
        needs.append(("data.shuffle_buffer", c["data.shuffle_buffer"] * example,
                      f"the shuffle buffer ({c['data.shuffle_buffer']} examples of {example} bytes)", "it"))
    if c["model.objective.estimator_buckets"]:
        buckets, hashes = c["model.objective.estimator_buckets"], c["model.objective.estimator_hashes"]
        needs.append(("model.objective.estimator_buckets", 16 * buckets * hashes,
                      f"the frequency estimator ({buckets} buckets x {hashes} hashes x 16 bytes)",
                      "it or model.objective.estimator_hashes"))
    for key, needed, what, lower in needs:
        if needed > available:
            yield key, (f"{what} needs at least {needed / 2**30:.1f} GiB, more than this machine's "
                        f"{available / 2**30:.1f} GiB of memory; lower {lower}")


# float32 slots per trained weight (Item2Vec's SGD keeps none; row-wise Adagrad one per table row, 1/d per weight)
OPTIMIZER_SLOTS = {"adam": 2, "adagrad": 1, "rowwise_adagrad": 0}


def table_bytes(c: Mapping[str, Any], n_items: int, n_users: int) -> int:
    """The bytes of a model's id embedding tables with their optimizer slots, once the vocabularies are known:
    item ids (and a separate history table, an output table, a user-id table where configured) for the two-tower
    model, input and output vectors for Item2Vec."""
    if c["model_type"] == "item2vec":
        return 2 * 4 * n_items * c["item2vec.dim"]
    dim = c["model.embedding_dim"]
    widths = [c["model.item_tower.id_embedding_dim"]]
    if not c["model.user_tower.share_item_embeddings"]:
        widths.append(c["model.user_tower.history_embedding_dim"])
    if c["model.objective.output_table"]:
        widths.append(dim + 1)
    user_width = c["model.user_tower.user_id_embedding_dim"]
    weights = n_items * sum(widths) + n_users * user_width
    return 4 * weights * (1 + OPTIMIZER_SLOTS.get(c["train.optimizer"], 2))


def check_tables(config: Mapping, n_items: int, n_users: int) -> None:
    """Raises ``InputError`` before a model is built when its embedding tables and their optimizer slots alone
    exceed this machine's memory (``train.strategy`` parameter_server keeps them on other machines: not checked)."""
    c = Settled(config)
    available = physical_memory_bytes()
    if not available or c["train.strategy"] == "parameter_server":
        return
    needed = table_bytes(c, n_items, n_users)
    if needed > available:
        key = "item2vec.dim" if c["model_type"] == "item2vec" else "model.embedding_dim"
        raise InputError(f"the embedding tables of {n_items} items and {n_users} users need at least "
                         f"{needed / 2**30:.1f} GiB with their optimizer slots, more than this machine's "
                         f"{available / 2**30:.1f} GiB of memory; lower the embedding widths, raise "
                         f"data.min_item_count or use train.strategy=parameter_server", field=f"config.{key}")


CROSS_CHECKS: tuple[Callable[[Mapping[str, Any]], Iterator[Problem]], ...] = (
    _data, _columns, _shards, _index_factory, _model, _declared_needs, _machine, _memory, _gate_metrics, _gate_lift)


def key_problems(config: Mapping) -> list[Problem]:
    """The unknown keys of ``config`` and the values their rules refuse."""
    problems = []
    for key, value in flatten(config):
        rule = RULES.get(key)
        if rule is None:
            problems.append((key, "unknown key (no such setting; see docs/reference.md)"))
        elif (refusal := rule.refusal(value)) is not None:
            problems.append((key, refusal))
    return problems


def config_problems(config: Mapping) -> list[Problem]:
    """Every problem of ``config``: unknown keys and values breaking their rule first, then the cross-key checks
    (they rely on types and ranges: one that trips on a refused value is skipped, its cause already reported), so
    that several mistakes are reported at once."""
    flat = Settled(config)
    problems = key_problems(config)
    refused = {key for key, _ in problems}
    for check in CROSS_CHECKS:
        try:
            problems.extend(problem for problem in check(flat) if problem[0] not in refused)
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError):  # a refused value: reported above
            if not refused:
                raise
    return problems


def validate_config(config: Mapping, cross_checks: bool = True) -> None:
    """Raises ``InputError`` naming every bad key of ``config`` (one line) unless it is valid; without
    ``cross_checks``, only each key against its own rule."""
    problems = config_problems(config) if cross_checks else key_problems(config)
    if len(problems) == 1:
        key, message = problems[0]
        raise InputError(message, field=f"config.{key}")
    if problems:
        raise InputError("; ".join(f"config.{key}: {message}" for key, message in problems))


def check_feature_tables(config: Mapping) -> None:
    """Reads the item and user feature tables as the prepare stage will (``catalogue.read_table``: the declared
    columns, one row per id, numeric values, bounded text cells) and refuses an item table whose ids share too
    little with the training log's items (``validate.table_overlap``, the refresh's check: its rows would be served
    as items nobody clicked); ``InputError`` naming the file, column and row. Run on a valid configuration, before
    TensorFlow loads: these contents were found only after it (6-13 s), the refresh finds them in 1-2 s."""
    c = Settled(config)
    for which, id_column in (("item", c["data.item_column"]), ("user", c["data.user_column"])):
        path = c[f"data.{which}_features_path"]
        if not path:
            continue
        table = catalogue.read_table(path, id_column, c[f"data.{which}_features"], f"data.{which}_features")
        if which == "item":
            columns = readers.ColumnNames(c["data.user_column"], id_column, c["data.timestamp_column"] or None)
            log = readers.distinct_items(c["data.train_path"], c["data.format"], columns)
            validate.table_overlap(table[id_column], log, path, id_column)


def validate_job(config: Mapping, output_dir: str, run_id: str) -> None:
    """The whole training invocation: the configuration, the run id, the output directory and the contents of the
    feature tables (:func:`check_feature_tables`, once the configuration is known to be valid)."""
    validate_config(config)
    locations.check_name(config["name"], "config.name")
    locations.check_name(run_id, "run_id")
    locations.check_output_dir(output_dir, config["name"], run_id)
    check_feature_tables(config)
