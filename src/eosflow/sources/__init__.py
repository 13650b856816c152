"""Where records come from: Kafka ranges, and the outbox a publisher reads."""
