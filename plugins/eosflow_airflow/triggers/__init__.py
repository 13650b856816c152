"""Triggers: the Kafka wake-up of an ingest DAG, run in the triggerer."""
