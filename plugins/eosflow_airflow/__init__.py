"""Airflow-side code of eosflow: hooks onto the connections, the tasks, and the DAG factories.

DAG files in dags/ only call the factories here; nothing in this package touches Kafka or the
warehouse at import time.
"""
