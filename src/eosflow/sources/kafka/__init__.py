"""Kafka as a source: partition offsets, and the bounded read of planned ranges."""
