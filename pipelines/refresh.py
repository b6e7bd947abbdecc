"""Refreshes the published run's catalogue from a new item feature table, without retraining.

    python -m pipelines.refresh --run_dir=artifacts/two_tower --item_features_path=items-today.csv

embeds every row of the table with the published run's item tower (new and changed items included; items gone
from the table leave the catalogue), builds and self-checks the index, runs the serving canary, and publishes a new
run of the same lineage (``latest`` moves atomically; a server with hot reload serves it at its next poll). The run
must have been trained with an item feature table (``data.item_features_path``); the new table has its id column
and its feature columns (other columns are not read). A table that removes or adds more than a quarter of the published catalogue is
refused unless ``--allow_large_change`` says it is meant. See ``retrieval.jobs.refresh`` and docs/scheduling.md (an
hourly refresh beside a daily retrain through ``pipelines.scheduled --job_module=pipelines.refresh``). Exit codes: 0 published, 2 bad input
(one line naming the file, column or row; nothing published or changed), 3 the index self-check or the canary
refused (``latest`` untouched; the refused run's files are removed, its manifest and stage records kept), 4 another
process holds the run. A refresh killed at any point is resumed by the next one with the same table (one stopped after
moving a link is completed first, whatever the next table).
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from retrieval import cli

_RUN = cli.RunDirFlags("refresh (the published run of its lineage)")
_TABLE = flags.DEFINE_string("item_features_path", None, "The new catalogue: an item feature table (csv, tsv, "
                             "parquet) with the trained id and feature columns (others are not read), one row per item to serve.")
_CANARY = flags.DEFINE_boolean("canary", True, "Run the serving canary on the new run before publishing it.")
_ALLOW_LARGE_CHANGE = flags.DEFINE_boolean(
    "allow_large_change", False, "Publish a table that removes or adds more than a quarter of the published "
    "catalogue (retrieval.jobs.refresh.MAX_CHANGE); without it such a table is refused (exit 2).")


def main(argv: Sequence[str]) -> None:
    cli.check_arguments(argv, _RUN.run_dir, _TABLE)
    from retrieval.jobs.refresh import refresh  # TensorFlow loads after the flags are checked

    _RUN.resolve()  # refused here, with the lineages there are, when it names no published run
    # The directory whose link names the published run, not the run it names now: a refresh that a kill stopped
    # after moving a link is completed first, and then the run to refresh from is the one it published.
    outcome = refresh(_RUN.watched(), _TABLE.value, canary=_CANARY.value,
                      allow_large_change=_ALLOW_LARGE_CHANGE.value)
    if outcome.unchanged:
        print(f"nothing to refresh: {outcome.run_dir} already publishes a table with the same contents as "
              f"{_TABLE.value} (no new run)")
        return
    print("gate passed:", *outcome.checked, sep="\n  ")
    where = "latest" if outcome.latest_moved else "its lineage's latest (latest stays on another lineage)"
    print(f"published catalogue refresh {outcome.run_dir} as {where}: {outcome.items} items ({outcome.new} new, "
          f"{outcome.removed} removed, {outcome.warm} with training interactions), refreshed from "
          f"{outcome.refreshed_from} in {outcome.seconds:.1f} s")


if __name__ == "__main__":
    cli.run(main)
