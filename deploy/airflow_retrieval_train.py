"""Airflow DAG of the scheduled training job (copy into your dags/ folder; Airflow 2.4 or later).

The task fails when the run did not publish (exit 2 bad input, 3 gate refused, 4 locked, other: failure), after
pipelines.scheduled has run deploy/alert.sh; Airflow's own retries and failure callbacks apply on top. Retries are
off: a gate refusal or bad input does not change on a retry, and a crashed run resumes on the next schedule (same
configuration and data) from its last checkpoint.
"""

import pendulum
from airflow import DAG
from airflow.operators.bash import BashOperator

with DAG("retrieval_train", schedule="15 3 * * *", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, max_active_runs=1) as dag:
    BashOperator(
        task_id="train",
        bash_command=("cd /opt/retrieval && .venv/bin/python -m pipelines.scheduled --alert_command=deploy/alert.sh "
                      "--config=configs/two_tower.py --config.data.train_path=/data/clicks/latest.parquet "
                      "--output_dir=/srv/models"),
        retries=0,
    )
