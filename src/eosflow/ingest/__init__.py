"""Exactly-once ingestion: plan, read, transform, stage, commit (see ../shared/DESIGN.md)."""
