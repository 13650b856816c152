"""What the pipelines look like now: one snapshot (state.py) for the Airflow view and the metrics."""
