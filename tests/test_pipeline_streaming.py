"""The training job with the streamed prepare (data.streaming=on): trains from TFRecord shards and publishes."""

import math

import pandas as pd

from retrieval.pipeline.job import TrainingJob
from tests.test_pipeline_job import log_path, make_config  # noqa: F401  (log_path is a fixture)


def test_streamed_run_trains_from_shards_and_publishes(log_path, tmp_path):  # noqa: F811
    config = make_config(log_path, **{"data.streaming": "on", "data.num_shards": 4,
                                      "model.objective.log_q": "static"})
    job = TrainingJob(config, str(tmp_path), "s1")
    outcome = job.run()
    assert outcome.published  # the gate also checked the 5% lift over most-popular
    prepare = job.stages.summary("prepare")
    assert prepare["streaming"]["shards"] == 4 and prepare["streaming"]["examples"] > 0
    steps = config.train.epochs * math.ceil(prepare["streaming"]["examples"] / config.train.batch_size)
    assert job.stages.summary("train")["steps"] == steps
    assert len(pd.read_parquet(job.paths.test_data)) == prepare["test_interactions"] == 300
