"""Exactly-once ingestion: plan, read, transform, stage, commit (see docs/DESIGN.md)."""
