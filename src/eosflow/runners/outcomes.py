"""How a run that did not commit is reported: an exit code and an outcome word per error, the same for
`eosflow ingest`, `backfill`, `stream` and a spark-submit run (the Airflow glue reads them from the log).

0 committed; 1 worth a retry (Kafka or the registry unreachable); 2 refused before anything was written
(a wrong declaration, request or credential; fix it first); 3 fenced (another run moved the positions);
4 data loss (records deleted before they were read); 5 what was written does not add up (nothing was
committed; a re-run of the same run id re-writes it).
"""

from __future__ import annotations

from eosflow.errors import PipelineConfigError, SinkAccessError, SinkUnavailableError
from eosflow.kafka_client import KafkaAuthenticationError, KafkaUnavailableError
from eosflow.ledger.backfill import BackfillError
from eosflow.ledger.mirror import CommitTimedOutError, LedgerBehindError
from eosflow.ledger.planner import DataLossError, PositionBeyondLogError, TopicRecreatedError
from eosflow.ledger.positions import (
    FencedError,
    ReplayCountError,
    ReplayOutsideCommittedError,
    StagingIncompleteError,
)
from eosflow.schema.avro import RegistryAuthenticationError, RegistryUnavailableError
from eosflow.schema.user_transform import TransformContractError
from eosflow.sources.kafka.offsets import TopicMissingError
from eosflow.sources.kafka.range_read import ReadDataLossError, ReadStalledError
from eosflow.sources.kafka.read import ReadOutsidePlanError
from eosflow.sources.kafka.read_back import ReadBackIncompleteError
from eosflow.spark.connect import SparkConnectUnavailableError, SparkConnectVersionError
from eosflow.spark.server_code import ServerCodeError
from eosflow.spark.versions import MixedPysparkError

EXIT: dict[type[Exception], int] = {
    FencedError: 3,
    DataLossError: 4,
    ReadDataLossError: 4,
    StagingIncompleteError: 5,
    ReplayOutsideCommittedError: 5,
    ReplayCountError: 5,
    ReadOutsidePlanError: 5,
    PositionBeyondLogError: 2,
    TopicRecreatedError: 2,
    BackfillError: 2,
    CommitTimedOutError: 2,
    LedgerBehindError: 2,
    PipelineConfigError: 2,
    TopicMissingError: 2,
    KafkaAuthenticationError: 2,
    TransformContractError: 2,
    RegistryAuthenticationError: 2,
    SinkAccessError: 2,
    MixedPysparkError: 2,  # the installation, not the run: a retry meets it again
    SparkConnectVersionError: 2,  # the same
    ServerCodeError: 2,  # the same: a warm server's installed eosflow is not the run's
    SparkConnectUnavailableError: 1,
    KafkaUnavailableError: 1,
    ReadStalledError: 1,
    ReadBackIncompleteError: 1,
    RegistryUnavailableError: 1,
    SinkUnavailableError: 1,
}
OUTCOME: dict[type[Exception], str] = {
    FencedError: "fenced",
    DataLossError: "data loss",
    ReadDataLossError: "data loss",
    BackfillError: "refused",
    CommitTimedOutError: "timed out",
    TopicRecreatedError: "refused",
    ReplayCountError: "refused",
}

# An entry per error class there, its anchor the class name in lower case
# (tests/unit/project/test_docs_reference.py).
TROUBLESHOOTING = "docs/troubleshooting.md"


def reported(exc: BaseException) -> tuple[int, str]:
    """An error EXIT knows -> (the exit code, its one line: `OUTCOME: message (cause and fix: <entry>)`).

    One line, so that whoever reads the last line (the Airflow task's error, the lab's report) has the
    entry too. The entry is the raised class's own (a subclass has one of its own)."""
    kind = next(k for k in EXIT if isinstance(exc, k))
    return EXIT[kind], f"{OUTCOME.get(kind, 'failed').upper()}: {exc} ({entry(exc)})"


def entry(exc: BaseException) -> str:
    """Where the cause and the fix of `exc` are written down: its class's troubleshooting entry."""
    return f"cause and fix: {TROUBLESHOOTING}#{type(exc).__name__.lower()}"
