"""benchmarks/bench_catalogue.py: a smoke run (one subprocess per mode at one size: rows complete, the lazy optimizer
used exactly where asked, the row-wise mode on row-wise Adagrad), the paired ratios and medians over repeats (with
the children's measurements replaced), the floor mode's stateless row step, a size too large for the machine skipped, and the Zipf log's draws and
distinct rows per batch."""

from unittest import mock

import numpy as np

from benchmarks import bench_catalogue


def test_bench_catalogue_smoke():
    rows = bench_catalogue.run(smoke=True, sizes=[300], modes=("off", "rowwise", "floor"))  # ratios: faked below
    assert [(row["items"], row["sparse_updates"]) for row in rows] == [(300, "off"), (300, "rowwise"), (300, "floor")]
    for row in rows:
        assert row["examples_per_s"] > 0 and row["examples_per_cpu_s"] > 0 and row["peak_rss_mb"] > 0, row
        assert row["lazy_optimizer"] == (row["sparse_updates"] != "off"), row
        assert (row["optimizer_class"] == "LazyRowwiseAdagrad") == (row["sparse_updates"] == "rowwise"), row
    assert rows[0]["ratio_vs_smallest"] == rows[1]["ratio_vs_smallest"] == rows[0]["ratio_vs_shipped_smallest"] == 1


def test_ratios_are_paired_per_repeat_and_rates_are_medians():
    """Repeat r measures every rate times (1, 2, 4)[r]: the paired ratios are exact whatever the drift."""
    calls = []

    def spawn(items, mode, smoke, jit_compile, distribution):
        calls.append((items, mode))
        rate = {300: 1000.0, 1_000_000: 800.0}[items] * (0.5 if mode == "on" else 1) * (1, 2, 4)[(len(calls) - 1) // 4]
        return {"examples_per_s": rate, "examples_per_cpu_s": rate / 2, "lazy": mode == "on", "optimizer": "x",
                "peak_rss_mb": 1.0}

    with mock.patch.object(bench_catalogue, "_spawn", spawn):
        rows = bench_catalogue.run(smoke=True, sizes=[300, 1_000_000], modes=("off", "on"), repeats=3)
    assert calls == [(300, "off"), (300, "on"), (1_000_000, "off"), (1_000_000, "on")] * 3  # sizes interleaved
    big_on = rows[3]
    assert (big_on["examples_per_s"], big_on["examples_per_s_min"], big_on["examples_per_s_max"]) == (800, 400, 1600)
    assert big_on["ratio_vs_smallest"] == 0.8 and big_on["ratio_vs_shipped_smallest"] == 0.4
    assert big_on["ratio_vs_shipped_smallest_cpu"] == 0.4 and big_on["meets_target"] is False
    assert rows[0]["load_average_before"] and rows[0]["wall_s"] >= 0


def test_a_catalogue_beyond_the_memory_is_skipped():
    rows = bench_catalogue.run(smoke=True, sizes=[10 ** 12], modes=("off",))
    assert all("skipped" in row and "examples_per_s" not in row for row in rows)


def test_zipf_draws_follow_the_ranks_and_touch_fewer_rows_than_uniform():
    items, examples = 1000, 20_000
    zipf = bench_catalogue._log(items, examples, "zipf")
    draws = zipf["history"].ravel()
    assert draws.min() >= 2 and draws.max() <= items + 1
    share = np.bincount(draws, minlength=items + 2)[2:] / draws.size
    expected = 1 / np.arange(1, items + 1) / np.sum(1 / np.arange(1, items + 1))  # exponent 1.0
    np.testing.assert_allclose(share[:5], expected[:5], rtol=0.05)  # rank 1 at index 2, the vocabulary's order
    uniform_rows = bench_catalogue.distinct_rows(bench_catalogue._log(items, examples), 100)
    zipf_rows = bench_catalogue.distinct_rows(zipf, 100)
    batch = zipf["history"][:100]
    assert zipf_rows["distinct_history_rows_per_batch"] < uniform_rows["distinct_history_rows_per_batch"]
    assert uniform_rows["distinct_label_rows_per_batch"] <= 100
    assert bench_catalogue.distinct_rows({"history": batch, "label": zipf["label"][:100]}, 100) == {
        "distinct_history_rows_per_batch": len(np.unique(batch)),
        "distinct_label_rows_per_batch": len(np.unique(zipf["label"][:100]))}


def test_the_floor_mode_steps_the_rows_without_state():
    """The floor's lazy step (``child``'s patch) is plain SGD on the touched rows, duplicates summed."""
    import tensorflow as tf

    from retrieval.optimizers import LazyAdam

    table = tf.Variable(tf.ones([4, 2]))
    optimizer = LazyAdam(learning_rate=0.5, dense_from_share=None)  # the lazy step, whatever the share
    gradient = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [1.0, 1.0]]), tf.constant([1, 3, 1]))
    with mock.patch.object(LazyAdam, "_sparse_step", bench_catalogue.stateless_step):
        optimizer.apply_gradients([(gradient, table)])
    np.testing.assert_allclose(table.numpy(), [[1, 1], [0, -0.5], [1, 1], [-0.5, -1]])
