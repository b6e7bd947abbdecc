"""A fresh index without retraining: the published run's item tower embeds a new catalogue table.

The item tower of a run with item features is exported (``<run>/item_tower/``, ``retrieval.export``): it embeds any
item from its id (warm ids read their trained row, any other id the unknown-id row) and its coded features. A refresh

1. reads the published run (the model directory's ``latest`` or a lineage's, or a run directory) and the new table:
   the id column and the feature columns the model was trained with (``vocab/item_features.json``; other columns
   are not read, as in training); a missing id or feature column, a duplicate id, a non-numeric value of a numeric
   feature, a text cell over ``features.MAX_TEXT_CHARS``, ids that share too little with the items the model was trained on
   (``validate.table_overlap``: another id column or scheme), or a table that removes or adds more than
   :data:`MAX_CHANGE` of the published catalogue without ``allow_large_change`` is bad input (exit 2) and nothing is
   written;
2. codes the table with the run's specs (values the model never saw are "missing") and embeds every row with the
   item tower: new items and changed ones get new vectors, unchanged ones the vectors they had; items gone from the
   table leave the catalogue (the table *is* the catalogue: list every item to serve); with the cold head, every row
   is also embedded as if new (``placed_by_features``, for the folded item-to-item view, ``retrieval.index.similar``);
3. writes a new run of the same lineage beside the published one: the user tower, training histories, vocabularies
   and metrics are hard links to the published run's (nothing retrained, so nothing else changes), the new
   ``item_embeddings.parquet`` and ``vocab/items.parquet`` describe the new catalogue, ``vocab/training_items.parquet``
   keeps the vocabulary the id tables are indexed by (for a later warm start), and the manifest names the run it
   was refreshed from (``refreshed_from``) and the run that trained its towers (``trained_run``: retention keeps both,
   ``ModelDirectory.dependencies``);
4. builds the index with its recall self-check and runs the serving canary on the new run; then, under the publish
   lock, its gate passes it only if both passed and the lineage still publishes the run it started from, and it is
   published: the lineage's ``latest`` (and ``latest`` when the lineage is production's) is pointed at it (atomic
   renames) and its manifest says ``published``. A server with hot reload picks it up at its next poll.

Steps 2-4 are stages on the job's stage runner (``embed``, ``index``, ``canary``, ``gate``, ``publish``; a marker
each in ``<run>/stages/``), so a refresh killed at any point is resumable: the next refresh of the same table (same
bytes and options) resumes its run where it stopped; one of another table removes it (nothing names it). A refresh
killed after it moved the first link (lineage link moved, ``latest`` not yet; or both moved, manifest not yet
``published``) is completed by the next refresh whatever its table, before anything else: both links then name it and
its manifest says ``published``.

A refused self-check or canary is ``GateError`` (exit 3): ``latest`` stays where it was, and the refused run's files
(links, vectors, index) are removed; its manifest (``rejected``, with the gate's reasons) and stage records stay,
and retention removes them like any finished run.

What a refresh does not change: the user tower, whose id vocabulary is the training run's. An item added by a
refresh is a candidate for everyone at once, but the tower cannot read it in a request's history until a retrain
knows it: serving reports it in the answer's ``unknown_history``, does not count it in ``history_used``, and still
excludes it from the answer (``retrieval.serving.generator``). An item a refresh removed still counts in the
histories that hold it; catalogue items that were cold at training time count in histories through their features.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from absl import logging

from retrieval import artifacts
from retrieval.data import features, readers, validate
from retrieval.data.vocab import NUM_RESERVED, OOV, PAD, Vocabulary
from retrieval.errors import GateError, InputError, LockedError
from retrieval.jobs import gate
from retrieval.jobs.publish import ModelDirectory
from retrieval.jobs.sections import Settled
from retrieval.jobs.stages import StageRunner
from retrieval.locations import new_run_id, resolve_run_dir

BATCH = 8192  # items per call of the item tower
# Share of the published catalogue a refresh may remove, and may add, unless asked (``allow_large_change``): a
# table that drops half the catalogue is more often a truncated export than a decision.
MAX_CHANGE = 0.25
LINKED_FILES = ("config.json", "metrics.json", "id_tables.npz", "data/train.parquet", "data/test.parquet",
                "vocab/users.parquet", "vocab/item_features.json")
LINKED_DIRS = ("user_tower", "item_tower")
KEPT = ("manifest.json", "stages", ".lock")  # what a refused refresh keeps, and what a rerun of its embed stage keeps


@dataclasses.dataclass
class RefreshOutcome:
    """What a refresh published: the new run and its catalogue counts."""

    run_dir: str
    refreshed_from: str
    items: int
    new: int
    removed: int
    warm: int
    latest_moved: bool
    seconds: float
    resumed: bool  # a refresh of the same table that a kill had stopped was finished
    checked: list[str]  # the gate's gate.mark-ed lines (index self-check, canary, lineage)
    unchanged: bool = False  # the published run is a refresh of a table with the same contents: nothing was done


def read_table(path: str, id_column: str, specs: list[features.FeatureSpec]) -> pd.DataFrame:
    """The new catalogue table's id column and trained feature columns, checked (module docstring, step 1). Other
    columns are not read, as training reads only the declared ones: the dump a run was trained on refreshes it."""
    kinds = {spec.name: spec.kind for spec in specs}
    table = readers.read_features(path, id_column, kinds=kinds, columns=list(kinds))
    if table.empty:
        raise InputError("the catalogue table has no rows", path=path)
    return table


def check_change(previous: np.ndarray, item_ids: np.ndarray, path: str, allow_large_change: bool) -> tuple[int, int]:
    """(new, removed): the items of ``item_ids`` not in the published catalogue ``previous`` and those of it gone;
    ``InputError`` naming the counts when either is more than :data:`MAX_CHANGE` of ``previous``, unless
    ``allow_large_change``."""
    new = int((~pd.Index(item_ids).isin(previous)).sum())
    removed = int((~pd.Index(previous).isin(item_ids)).sum())
    for count, what in ((removed, f"removes {removed:,} of the"), (new, f"adds {new:,} items to the")):
        if count > MAX_CHANGE * len(previous) and not allow_large_change:
            raise InputError(f"the table {what} {len(previous):,} items of the published catalogue "
                             f"({count / len(previous):.0%}; a refresh changes at most {MAX_CHANGE:.0%} unless "
                             "asked): check the table, or pass --allow_large_change to publish it", path=path)
    return new, removed


def embed(item_tower: Path, item_ids: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Item vectors [N, d] from the exported item tower (ids and coded values by row, in ``feature_names`` order)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(item_tower))
    serve = loaded.signatures["serving_default"]
    names = [name.decode() for name in loaded.feature_names.numpy()]
    blocks = [np.zeros((0, 0), np.float32)]
    for start in range(0, len(item_ids), BATCH):
        stop = start + BATCH
        inputs = {f"feature_{i}": tf.constant(arrays[name][start:stop]) for i, name in enumerate(names)}
        blocks.append(serve(item_id=tf.constant(item_ids[start:stop].astype(str)), **inputs)["embedding"].numpy())
    return np.concatenate([b for b in blocks if b.size] or [np.zeros((0, 1), np.float32)])


def _link(source: Path, target: Path) -> None:
    """Hard links ``source`` (a file or a directory tree) at ``target``: the run's files, shared, never copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, copy_function=os.link)
    elif source.is_file():
        os.link(source, target)


def _new_run(model_dir: ModelDirectory) -> str:
    """A new run id: the time, with a counter when a run of the same second exists."""
    base = new_run_id()
    run_id, count = base, 1
    while (model_dir.root / run_id).exists():
        run_id, count = f"{base}-{count}", count + 1
    return run_id


def _fingerprint(path: str) -> str:
    """SHA-256 of a file's bytes: the table a refresh run was started with, which a rerun must match to resume it."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclasses.dataclass
class _Plan:
    """What a refresh will publish, worked out and checked before TensorFlow loads (module docstring, step 1)."""

    parent: artifacts.RunPaths
    config: dict
    specs: list[features.FeatureSpec]
    id_column: str
    table: pd.DataFrame
    training: Vocabulary
    manifest: dict  # the new run's manifest as it starts
    options: dict  # recall_floor, canary


def _plan(model_dir: ModelDirectory, run_dir: str, table_path: str, recall_floor: Optional[float], canary: bool,
          allow_large_change: bool) -> _Plan:
    """Reads and checks the published run and the new table (every bad-input refusal of a refresh is here)."""
    parent = artifacts.RunPaths(resolve_run_dir(run_dir))
    if not parent.item_tower.is_dir() or not parent.item_features.is_file():
        raise InputError("the run has no item tower: it was trained without an item feature table, so nothing can "
                         "embed a new item (train with data.item_features_path)", path=str(parent.root))
    manifest = artifacts.read_json(parent.manifest)
    lineage = model_dir.lineage_of_run(parent.root.name)
    if lineage and model_dir.published(lineage) != parent:
        raise InputError(f"run {parent.root.name} is not the published run of lineage {lineage}: a refresh renews "
                         "what is served (give the model directory)", field="run_dir")
    id_column, specs = features.load_specs(parent.item_features)
    table = read_table(table_path, id_column, specs)
    item_ids = table[id_column].astype(str).to_numpy(dtype=object)
    training = Vocabulary.load(parent.model_item_vocab)
    counts = training.counts[training.lookup(item_ids)]  # OOV (index 1) has count 0
    warm = training.ids[NUM_RESERVED:][training.counts[NUM_RESERVED:] > 0]
    validate.table_overlap(item_ids, warm, table_path, id_column, log="the model's training log")
    previous = pq.read_table(parent.item_embeddings, columns=["item_id"]).column("item_id").to_numpy(
        zero_copy_only=False).astype(object)
    new, removed = check_change(previous, item_ids, table_path, allow_large_change)
    identity = {"table": table_path, "table_sha256": _fingerprint(table_path), "refreshed_from": parent.root.name,
                "allow_large_change": allow_large_change, "canary": canary, "recall_floor": recall_floor}
    started = {key: value for key, value in manifest.items() if key not in ("gate", "stage_seconds")}
    started.update(status="running", refreshed_from=parent.root.name, trained_run=model_dir.trained_run(
        parent.root.name), refresh=identity, catalogue={"items": len(item_ids), "new": new, "removed": removed,
                                                          "warm": int((counts > 0).sum()), "table": table_path})
    config = artifacts.read_json(parent.config) if parent.config.is_file() else {}
    return _Plan(parent, config, specs, id_column, table, training, started,
                 {"recall_floor": recall_floor, "canary": canary})


def _open_runs(model_dir: ModelDirectory) -> list[str]:
    """The catalogue refreshes of ``model_dir`` that neither published nor were refused (a killed refresh's run)."""
    runs = []
    for path in sorted(model_dir.root.iterdir()):
        manifest = path / "manifest.json"
        if path.is_dir() and not path.is_symlink() and not path.name.startswith(".") and manifest.is_file():
            recorded = artifacts.read_json(manifest)
            if recorded.get("refreshed_from") and recorded.get("status") == "running":
                runs.append(path.name)
    return runs


def _remove(model_dir: ModelDirectory, name: str) -> None:
    """Deletes a run directory that nothing links to (renamed aside first: never seen half-deleted)."""
    doomed = model_dir.root / f".{name}.deleting"
    os.rename(model_dir.root / name, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _stage_seconds(stages: StageRunner) -> dict:
    """Each stage's seconds, and their sum as ``refresh`` (what the manifest of a refresh has always reported)."""
    return {**stages.timings, "refresh": round(sum(stages.timings.values()), 3)}


def _published_run(model_dir: ModelDirectory, lineage: str) -> Optional[str]:
    published = model_dir.published(lineage)
    return published.root.name if published is not None else None


def _publish(model_dir: ModelDirectory, paths: artifacts.RunPaths, stages: StageRunner) -> dict:
    """The publish stage: points the lineage's link (and ``latest`` when it is production) at the run, marks its
    manifest published, prunes old runs. Idempotent: a rerun after a kill between its steps completes them."""
    manifest = artifacts.read_json(paths.manifest)
    run_id, parent = paths.root.name, manifest["refreshed_from"]
    lineage = model_dir.lineage_of_run(run_id)
    current = _published_run(model_dir, lineage)
    if current not in (run_id, parent):
        raise GateError(f"lineage {lineage} published {current} while refreshing from {parent}; refresh that one "
                        f"(run kept at {paths.root}, latest untouched)")
    production = model_dir.publish(run_id, lineage)
    manifest.update(status="published", gate=stages.summary("gate"), stage_seconds=_stage_seconds(stages))
    artifacts.write_json(paths.manifest, manifest)
    removed = model_dir.retain(int(Settled(artifacts.read_json(paths.config))["publish.keep_last"]))
    return {"latest": run_id, "lineage": lineage, "production": production, "removed": removed}


def _finish_interrupted(model_dir: ModelDirectory) -> None:
    """Completes the publish stage of every refresh that a kill stopped after it moved a link (a link names the run,
    its manifest still says running): the links then agree and the run is recorded as published. Call under the
    publish lock; runs another process holds are left to it."""
    for run_id in _open_runs(model_dir):
        if run_id not in model_dir.published_runs():
            continue
        try:
            with model_dir.run_lock(run_id):
                stages = StageRunner(model_dir.run_paths(run_id))
                stages.run("publish", functools.partial(_publish, model_dir, stages.paths, stages))
        except LockedError:
            continue
        logging.warning("refresh %s had moved a link when it stopped; its publishing is now complete", run_id)


def _clear(root: Path) -> None:
    """Removes everything in a refresh run's directory but :data:`KEPT` (its record and its lock)."""
    for entry in root.iterdir():
        if entry.name in KEPT:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _claim(model_dir: ModelDirectory, plan: _Plan, held: contextlib.ExitStack) -> tuple[str, bool]:
    """The run this refresh works in, its run lock entered on ``held``: the unfinished refresh of the same table and
    options when one is left (resumed: True), else a new run whose manifest is in place before anyone can see it.
    Unfinished refreshes of other tables are removed (nothing names them). Call under the publish lock."""
    for stale in model_dir.root.glob(".*.creating"):
        shutil.rmtree(stale, ignore_errors=True)
    for run_id in _open_runs(model_dir):
        lock = contextlib.ExitStack()
        try:
            lock.enter_context(model_dir.run_lock(run_id))
        except LockedError:
            continue
        with lock:
            if artifacts.read_json(model_dir.run_paths(run_id).manifest).get("refresh") == plan.manifest["refresh"]:
                held.enter_context(lock.pop_all())
                return run_id, True
            logging.info("removing refresh %s: it stopped unfinished, and this refresh has another table", run_id)
            _remove(model_dir, run_id)
    run_id = _new_run(model_dir)
    creating = model_dir.root / f".{run_id}.creating"
    creating.mkdir()
    artifacts.write_json(creating / "manifest.json", {**plan.manifest, "run_id": run_id, "version": run_id})
    os.rename(creating, model_dir.root / run_id)
    held.enter_context(model_dir.run_lock(run_id))
    return run_id, False


class _RefreshRun:
    """The stages of one refresh run (module docstring, steps 2-4), resumable: each leaves its marker."""

    def __init__(self, model_dir: ModelDirectory, run_id: str, plan: _Plan):
        self.model_dir, self.plan = model_dir, plan
        self.paths = model_dir.run_paths(run_id)
        self.stages = StageRunner(self.paths)

    def run(self) -> dict:
        """Runs (or resumes) every stage; returns the publish stage's summary, or raises ``GateError`` after
        discarding a refused run (its manifest and stage records stay)."""
        self.stages.run("embed", self._embed)
        self.stages.run("index", self._index)
        self.stages.run("canary", self._canary)
        with self.model_dir.publish_lock():
            decision = self.stages.run("gate", self._gate)
            if decision["passed"]:
                return self.stages.run("publish", lambda: _publish(self.model_dir, self.paths, self.stages))
        self._discard(decision)
        raise GateError("; ".join(decision["reasons"]) + f" (the refresh's files are removed, its record kept at "
                                                          f"{self.paths.root}; latest untouched)")

    def _embed(self) -> dict:
        from retrieval import export
        from retrieval.index.similar import SCORE_CORRELATION

        _clear(self.paths.root)  # a killed attempt's partial files
        parent, plan = self.plan.parent, self.plan
        for name in LINKED_FILES + LINKED_DIRS:
            _link(parent.root / name, self.paths.root / name)
        item_ids = plan.table[plan.id_column].astype(str).to_numpy(dtype=object)
        catalogue = Vocabulary(np.concatenate([[PAD, OOV], item_ids]), np.zeros(len(item_ids) + NUM_RESERVED, np.int64))
        arrays = features.feature_arrays(plan.table, plan.id_column, catalogue, plan.specs)
        values = {name: array[NUM_RESERVED:] for name, array in arrays.items()}
        vectors = embed(parent.item_tower, item_ids, values)
        placed = None  # the item-to-item view's second placement: every item as if new (no id the tower knows)
        if artifacts.read_json(parent.manifest).get("item_similarity") == SCORE_CORRELATION:
            placed = embed(parent.item_tower, np.full(len(item_ids), "", dtype=object), values)
        counts = plan.training.counts[plan.training.lookup(item_ids)]
        plan.training.save(self.paths.training_item_vocab)
        Vocabulary(catalogue.ids, np.concatenate([[0, 0], counts])).save(self.paths.item_vocab)
        export.write_item_embeddings(self.paths.item_embeddings, item_ids, vectors, counts > 0, placed)
        return dict(plan.manifest["catalogue"])

    def _index(self) -> dict:
        from retrieval.index.run_index import build_run_index
        from retrieval.index.selfcheck import IndexQualityError

        c, floor = Settled(self.plan.config), self.plan.options["recall_floor"]
        try:
            index = build_run_index(self.paths, factory=c["index.factory"],
                                    recall_floor=floor if floor is not None else c["index.recall_floor"],
                                    recall_k=c["index.recall_k"], seed=c["seed"])
        except IndexQualityError as e:
            return {"refused": f"the index self-check refused the refreshed catalogue: {e}"}
        return {key: index.manifest.get(key) for key in ("factory", "count", "search_params", "self_check")}

    def _canary(self) -> dict:
        from retrieval.serving.canary import Canary, CanaryError
        from retrieval.serving.generator import CandidateGenerator

        if "refused" in self.stages.summary("index"):
            return {"skipped": "the index was refused"}
        if not self.plan.options["canary"]:
            return {"skipped": "canary turned off (--canary=false)"}
        try:
            return Canary()(CandidateGenerator.from_run(self.paths.root))
        except CanaryError as e:
            return {"refused": f"the serving canary refused the refreshed run: {e}"}

    def _gate(self) -> dict:
        """The refresh's gate: the index self-check and the canary passed, and the lineage still publishes the run
        it was refreshed from (a retrain published meanwhile: its catalogue is the newer one)."""
        index, canary = self.stages.summary("index"), self.stages.summary("canary")
        reasons = [summary["refused"] for summary in (index, canary) if "refused" in summary]
        lineage, parent = self.model_dir.lineage_of_run(self.paths.root.name), self.plan.parent.root.name
        current = _published_run(self.model_dir, lineage)
        if current in (parent, self.paths.root.name):
            checked_lineage = gate.mark(gate.PASS, f"lineage {lineage} still publishes {current}")
        else:
            reasons.append(f"lineage {lineage} published {current} while refreshing from {parent}; refresh that one")
            checked_lineage = gate.mark(gate.FAIL, f"lineage {lineage} published {current}, not {parent}")
        return gate.GateDecision(not reasons, reasons, [_index_line(index), _canary_line(canary),
                                                        checked_lineage]).as_dict()

    def _discard(self, decision: dict) -> None:
        """Removes a refused refresh's files (links, vectors, index: up to the size of the catalogue's vectors)
        and keeps its record: the manifest, now ``rejected`` with the gate's decision, and the stage markers."""
        _clear(self.paths.root)
        manifest = artifacts.read_json(self.paths.manifest)
        manifest.update(status="rejected", gate=decision, stage_seconds=_stage_seconds(self.stages), discarded=True)
        artifacts.write_json(self.paths.manifest, manifest)


def _index_line(index: dict) -> str:
    """The index stage's summary as a gate's ``checked`` line, marked as the training gate marks its checks
    (``gate.mark``): ``[pass]`` with the self-check's recall against its floor, ``[FAIL]`` when it refused."""
    check = index.get("self_check") or {}
    if "refused" in index or not check:
        return gate.mark(gate.FAIL, "index self-check: refused")
    return gate.mark(gate.PASS, f"index self-check recall@{check['k']} {check['recall']:.4f} vs floor "
                                f"{check['floor']:.4f}")


def _canary_line(canary: dict) -> str:
    """What the canary measured, in one marked line (a gate's ``checked`` entry): ``[FAIL]`` when it refused,
    ``[skip]`` when it did not run or had too few items for its quality check, else ``[pass]`` with its recall."""
    quality = canary.get("quality") or {}
    if "refused" in canary:
        return gate.mark(gate.FAIL, f"canary: {canary['refused']}")
    if "skipped" in canary:
        return gate.mark(gate.SKIP, f"canary: {canary['skipped']}")
    if "skipped" in quality:
        return gate.mark(gate.SKIP, f"canary passed; its quality check skipped: {quality['skipped']}")
    return gate.mark(gate.PASS, f"canary recall@{quality['k']} {quality['recall']:.4f} vs floor "
                                f"{quality['floor']:.4f} on {quality['users']} users")


def refresh(run_dir: str | os.PathLike, table_path: str, *, recall_floor: Optional[float] = None,
            canary: bool = True, allow_large_change: bool = False) -> RefreshOutcome:
    """Publishes a new catalogue from ``table_path`` for the published run at ``run_dir`` (module docstring);
    ``allow_large_change``: publish a table that removes or adds more than :data:`MAX_CHANGE` of the catalogue.
    A refresh of the same table that a kill stopped is resumed; one stopped after moving a link is completed."""
    start = time.monotonic()
    model_dir = ModelDirectory(resolve_run_dir(str(run_dir)).parent)
    with model_dir.publish_lock():
        _finish_interrupted(model_dir)
    plan = _plan(model_dir, str(run_dir), str(table_path), recall_floor, canary, allow_large_change)
    catalogue = plan.manifest["catalogue"]
    served = artifacts.read_json(plan.parent.manifest).get("refresh") or {}
    if served.get("table_sha256") == plan.manifest["refresh"]["table_sha256"]:
        # An hourly refresh of an unchanged dump: a new run and a reload every hour would change nothing.
        logging.info("catalogue refresh: %s already publishes a table with the same contents; nothing to do",
                     plan.parent.root.name)
        return RefreshOutcome(str(plan.parent.root), served.get("refreshed_from", ""), catalogue["items"], 0, 0,
                              catalogue["warm"], False, round(time.monotonic() - start, 3), False, [], unchanged=True)
    with contextlib.ExitStack() as held:
        with model_dir.publish_lock():
            run_id, resumed = _claim(model_dir, plan, held)
        print(f"run directory: {model_dir.root / run_id}{' (resumed)' if resumed else ''}", flush=True)
        published = _RefreshRun(model_dir, run_id, plan).run()
    outcome = RefreshOutcome(str(model_dir.root / run_id), plan.parent.root.name, catalogue["items"],
                             catalogue["new"], catalogue["removed"], catalogue["warm"], published["production"],
                             round(time.monotonic() - start, 3), resumed,
                             artifacts.read_json(model_dir.run_paths(run_id).manifest)["gate"]["checked"])
    logging.info("catalogue refresh %s: %d items (%d new, %d removed, %d warm) in %.1f s", run_id, outcome.items,
                 outcome.new, outcome.removed, outcome.warm, outcome.seconds)
    return outcome
