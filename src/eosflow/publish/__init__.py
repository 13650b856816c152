"""Publishing: rows of a Postgres table (an outbox) into a Kafka topic, exactly once, with the source
position in the same Kafka transaction (KIP-618's guarantee, for data leaving the warehouse)."""
