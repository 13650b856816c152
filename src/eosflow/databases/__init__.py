"""A whole database in one declaration: Debezium table topics discovered as member pipelines."""
