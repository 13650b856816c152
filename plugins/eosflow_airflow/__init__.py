"""Airflow-side code of eosflow: hooks onto the connections, the tasks, and the DAG factories.

The DAG files in dag_files/ (served to Airflow as a DAG bundle: bundle.py) only call the factories here;
nothing in this package touches Kafka or the warehouse at import time.
"""
