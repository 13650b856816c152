"""Reports every pipeline and publisher pipelines.yml declares badly as this file's import error
(Airflow's "Dag Import Errors"), naming each and the reason. The other DAG files leave a refused one out
and make every other DAG: Airflow marks each DAG of a file with an import error stale, so the error is
raised here, in a file that makes no DAG, and hides none."""

from eosflow_airflow.dags import refuse_bad_pipelines

refuse_bad_pipelines()
