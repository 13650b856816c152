"""The names a declaration may use, as eosflow, Postgres and Kafka accept them: checked the same way for
pipelines, publishers and sinks."""

from __future__ import annotations

import re

NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # a pipeline's or a publisher's name
TABLE = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$")  # schema.table, in lower case
COLUMN = re.compile(r"^[a-z_][a-z0-9_]*$")
TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names
