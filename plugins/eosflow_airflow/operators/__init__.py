"""Operators: the eosflow tasks (plan, verify, announce, ...) and the Spark job's spark-submit."""
