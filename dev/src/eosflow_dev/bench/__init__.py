"""`eosflow bench`: eosflow's ingestion against the ceilings and the alternatives, on the same data.

One run loads a topic, then measures, one after the other on that topic: Kafka's read ceiling
(ConsumerPerformance), Postgres' write ceiling (COPY of the same rows), eosflow's job end to end and
its fixed overhead, a hand-written at-least-once consumer loop, and Spark Structured Streaming with
Trigger.AvailableNow. Every measurement that writes rows is checked to have written exactly the
loaded records. See bench/README.md for how to read the results.
"""
