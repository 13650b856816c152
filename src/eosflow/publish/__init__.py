"""Publishing (`eosflow publish`, docs/DESIGN.md "Publishing"): the rows of a warehouse table, an outbox, sent
to a Kafka topic exactly once, each batch with its position in the same Kafka transaction.

One module per step, in the order a run takes them:

- `declaration`: a publisher as the pipelines file declares it (`publishers:`), parsed and refused there;
- `position`: the position as a value (the last `(eosflow_xid, id)` published), and at_least_once's copy in
  the warehouse (`eosflow.publish_positions`);
- `offsets`: the position kept in Kafka, the publisher's own compacted offsets topic, read after fencing;
- `outbox`: the source, the outbox's committed rows after the position, read in commit order;
- `row_format`: how a row is written when it is not JSON (Avro or Protobuf, a schema from its columns);
- `run`: the loop that fences, reads the position and produces each batch with it (the CLI's and the
  Airflow task's `publish`).

The modules keep the layers of docs/development/layout.md (tests/unit/project/test_layers.py): `position` with
the ledger, `offsets`, `outbox` and `row_format` with the sources, `declaration` with the declarations and
`run` with the runners. This package's own module imports nothing.
"""
