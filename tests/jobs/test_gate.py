"""The gate's list of checks: one line per check, marked with its outcome, so a refusal shows which check failed."""

from retrieval.jobs import gate


def test_every_check_is_one_line_marked_with_its_outcome():
    decision = gate.check({"recall@20": 0.2693333333333333, "ndcg@20": 0.11}, {"recall@20": 0.99, "ndcg@20": 0.01},
                          {"recall@20": 0.25, "ndcg@20": 0.2}, ["recall@20", "ndcg@20"], 0.05,
                          min_lift_over_popular=0.05, popular={"recall@20": 0.0893},
                          baselines={"rp3beta": {"recall@20": 0.3053}})
    assert not decision.passed
    assert decision.checked == [
        "[FAIL] recall@20 0.2693 vs floor 0.9900",
        "[pass] ndcg@20 0.1100 vs floor 0.0100",
        "[pass] recall@20 0.2693 vs 1.05 x most-popular 0.0893",
        "[FAIL] recall@20 0.2693 vs best baseline rp3beta 0.3053",
        "[pass] recall@20 0.2693 vs published 0.2500 less 5%",
        "[FAIL] ndcg@20 0.1100 vs published 0.2000 less 5%",
    ]
    assert len(decision.reasons) == sum(line.startswith("[FAIL]") for line in decision.checked)


def test_a_check_without_anything_to_compare_is_marked_skipped_or_failed():
    first = gate.check({"recall@20": 0.3}, {}, None, ["recall@20"], 0.05, min_lift_over_popular=0.05, popular={},
                       unpublishable="scored on its validation data")
    assert first.checked == ["[FAIL] not publishable: scored on its validation data",
                             "[FAIL] recall@20 0.3000 vs 1.05 x most-popular missing",
                             "[skip] no published run of this lineage to compare with"]
    no_metric = gate.check({"recall@20": 0.3}, {}, None, [], 0.05, min_lift_over_popular=0.05)
    assert no_metric.checked[0] == "[FAIL] no metric in gate.compare to compare with the most-popular baseline"
