"""gate.beat_best_baseline: off by default (a model trailing the best baseline is published, stdout says it trails);
on, the gate refuses a model below the best baseline of the same evaluation on the first compared metric."""

import pytest

from retrieval import artifacts
from retrieval.jobs import gate
from retrieval.jobs.job import TrainingJob
from tests.jobs.test_pipeline_job import make_config

EVALUATION = {"recall@20": 0.1695, "ndcg@20": 0.09, "protocol/baselines": ["most_popular", "item_knn", "rp3beta"],
              "baseline/most_popular/recall@20": 0.05, "baseline/item_knn/recall@20": 0.156,
              "baseline/rp3beta/recall@20": 0.1773, "baseline/rp3beta/params/k": 200,
              "baseline/rp3beta/tuning/points": [{"a": 0.5, "recall@20": 0.18}], "baseline/rp3beta/tuning/note": "x",
              "baseline/item_knn/ndcg@20": 0.1, "protocol": "text"}


def test_baseline_metrics_are_every_evaluated_baselines_numbers():
    metrics = gate.baseline_metrics(EVALUATION)
    assert set(metrics) == {"most_popular", "item_knn", "rp3beta"}
    assert metrics["rp3beta"] == {"recall@20": 0.1773, "params/k": 200}  # lists and text left out
    assert metrics["item_knn"] == {"recall@20": 0.156, "ndcg@20": 0.1}


@pytest.mark.parametrize("model, passed", [(0.1695, False), (0.1773, True), (0.18, True), (0.17729999999, True)])
def test_the_model_must_reach_the_best_baseline_when_asked(model, passed):
    baselines = gate.baseline_metrics(EVALUATION)
    decision = gate.check({"recall@20": model}, {}, None, ["recall@20", "ndcg@20"], 0.05, baselines=baselines)
    assert decision.passed == passed, decision.reasons
    mark = "pass" if passed else "FAIL"
    assert f"[{mark}] recall@20 {model:.4f} vs best baseline rp3beta 0.1773" in decision.checked
    if not passed:
        assert decision.reasons == ["recall@20=0.1695 trails the best baseline rp3beta (0.1773; "
                                    "gate.beat_best_baseline)"]
    assert gate.check({"recall@20": model}, {}, None, ["recall@20"], 0.05).passed  # off unless asked


def test_without_a_baseline_or_a_metric_the_check_refuses():
    none = gate.check({"recall@20": 0.3}, {}, None, ["recall@20"], 0.05, baselines={})
    assert not none.passed and "no baseline in the evaluation" in none.reasons[0]
    no_metric = gate.check({"recall@20": 0.3}, {}, None, [], 0.05, baselines=gate.baseline_metrics(EVALUATION))
    assert not no_metric.passed and "no metric in gate.compare" in no_metric.reasons[0]


@pytest.mark.parametrize("beat, passed", [(False, True), (True, False)])
def test_the_job_gate_reads_the_config(log_path, tmp_path, beat, passed):
    """The job's gate stage compares with the evaluation's best baseline only when gate.beat_best_baseline is set."""
    config = make_config(log_path, **{"gate.beat_best_baseline": beat, "gate.min_lift_over_popular": -1.0,
                                      "gate.floors": ""})
    assert make_config(log_path).gate.beat_best_baseline is False  # the default
    job = TrainingJob(config, str(tmp_path), "r")
    job.paths.root.mkdir(parents=True)
    artifacts.write_json(job.paths.manifest, {"data_fingerprint": {}})
    artifacts.write_json(job.paths.metrics, EVALUATION)
    decision = job._gate({"recall@20": 0.1695, "ndcg@20": 0.09})
    assert decision["passed"] is passed
    assert any("best baseline rp3beta" in line for line in decision["checked"]) is beat
