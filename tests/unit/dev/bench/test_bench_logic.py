"""The bench's own pipelines file: one run must read the whole loaded topic, markers included."""

from __future__ import annotations

import yaml

from eosflow.ledger.planner import PartitionOffsets, plan_partitions
from eosflow_dev.bench.eosflow_run import write_pipelines_file


def test_one_run_reads_a_one_partition_topic_whole_despite_its_transaction_markers(tmp_path):
    records, txn = 1_000_000, 1_000
    span = records + records // txn  # every transaction of 1,000 ends in a commit marker
    path = write_pipelines_file(tmp_path / "p.yml", "p", "t", "raw.t", records)
    cap = yaml.safe_load(path.read_text())["pipelines"]["p"]["max_records_per_partition"]
    (part,) = plan_partitions("p", "t", {0: PartitionOffsets(0, span, initial=0)}, {}, cap, False)
    assert (part.range.start, part.range.end) == (0, span)  # not cut at 1,000,000 offsets
