"""Hooks: eosflow's settings from Airflow's connections, and its two connection types."""
