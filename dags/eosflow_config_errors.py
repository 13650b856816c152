"""Reports every pipeline pipelines.yml declares badly as this file's import error (Airflow's "Dag Import
Errors"), naming the pipeline and the reason. The other DAG files leave a refused pipeline out and make
every other pipeline's DAGs: Airflow marks each DAG of a file with an import error stale, so the error is
raised here, in a file that makes no DAG, and hides none."""

from eosflow_airflow.dags import refuse_bad_pipelines

refuse_bad_pipelines()
