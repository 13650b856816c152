"""Runners: batch, backfill, stream and publish, each orchestrating source -> transform -> sink."""
