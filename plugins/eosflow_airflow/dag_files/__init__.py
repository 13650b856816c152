"""eosflow's DAG files, served to Airflow as a DAG bundle (eosflow_airflow.bundle.EosflowDagBundle) from the
installed package, so nothing is copied into a DAGs folder (docs/DESIGN.md, "In a team's own Airflow").

One file per kind of DAG, each calling the factories of eosflow_airflow.dags; a pipeline pipelines.yml
declares badly is left out of them and reported as the import error of eosflow_config_errors.py, which makes
no DAG, so Airflow marks no other DAG stale for it.
"""
