"""eosflow: Kafka to warehouse, exactly once, and proven."""

__version__ = "0.1.0"
