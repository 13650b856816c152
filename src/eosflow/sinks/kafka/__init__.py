"""The Kafka sink: records and consumed offsets in one Kafka transaction, mirrored in the ledger."""
