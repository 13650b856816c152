"""Kafka-woken ingest DAGs: records arriving in a pipeline's topics wake its ingest DAG (issue 18).

An Airflow AssetWatcher runs `PipelineWakeTrigger` in the triggerer. When a record arrives, the trigger
fires, the asset gets an event, and the scheduler starts the ingest DAG (or queues one run behind the
one in flight: max_active_runs=1 coalesces every wake-up that comes meanwhile). The wake-up is only a
signal: it carries no offset, and the run plans from the ledger exactly as a scheduled run does.

Why not the provider's trigger as it stands: AwaitMessageTrigger takes the consumer's `group.id` from
the connection only, and commits one record per event. Here every pipeline has a group of its own,
`eosflow.wake.<pipeline>` (two pipelines reading one topic in one group would split its partitions
between them, and a record would wake only one of them); it is never the Kafka sink's
`eosflow.<pipeline>`, whose committed offsets are that sink's positions. And when it fires, the group
is committed at the end of every partition (the last stable offset: the consumer reads committed), so a
backlog of a million records is one wake-up, not a million wake-ups with runs back to back.

What the group commits means "signalled up to here" and nothing else. The commit happens before the
triggerer stores the event (as in the provider): a triggerer that dies in between loses that wake-up,
and the DAG's interval schedule picks the records up instead.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.kafka.hooks.consume import KafkaConsumerHook
from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger
from airflow.providers.common.compat.module_loading import import_string
from airflow.triggers.base import TriggerEvent

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

    from eosflow.pipelines import Pipeline

WAKE_GROUP_PREFIX = "eosflow.wake."
ARRIVED = f"{__name__}.records_arrived"


def wake_group_id(pipeline_name: str) -> str:
    """The wake-up's consumer group. Pipeline names have no dot: never a sink's eosflow.<name>."""
    return f"{WAKE_GROUP_PREFIX}{pipeline_name}"


def records_arrived(message: Message) -> dict[str, Any]:
    """The trigger's apply_function: any record (a tombstone too) means records arrived.

    Nothing of the record is kept, above all not its offset: the run plans from the ledger.
    """
    return {"records_arrived": True, "topic": message.topic()}


class _WakeConsumerHook(KafkaConsumerHook):
    """The connection's client configuration (kafka_default: eosflow's own), with the wake-up's group."""

    def __init__(self, group_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group_id = group_id

    def _build_config(self) -> dict[str, Any]:
        return super()._build_config() | {
            "group.id": self.group_id,
            "enable.auto.commit": False,  # the group moves only when the trigger says so
            "auto.offset.reset": "earliest",  # a new group misses nothing: its first start is one wake-up
            "isolation.level": "read_committed",  # open or aborted transactions wake nobody
        }


def _commit_the_ends(consumer: Consumer) -> dict[str, int]:
    """Commit the group at the end of each assigned partition (read_committed: the last stable offset).

    Everything up to there is signalled by this one wake-up: the run it wakes plans later, from the
    ledger, up to the end of the log at that time, which is at least this far.
    """
    from confluent_kafka import TopicPartition

    ends = [
        TopicPartition(
            tp.topic, tp.partition, consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        )
        for tp in consumer.assignment()
    ]
    if ends:
        consumer.commit(offsets=ends, asynchronous=False)
    return {f"{tp.topic}[{tp.partition}]": tp.offset for tp in ends}


class PipelineWakeTrigger(AwaitMessageTrigger):
    """The provider's AwaitMessageTrigger with the wake-up's own consumer group, skipping to the end
    of the log when it fires. It fires once and ends; the triggerer starts it again for the asset."""

    def __init__(self, *, group_id: str, commit_offset: bool = True, **kwargs: Any) -> None:
        if not group_id.startswith(WAKE_GROUP_PREFIX):
            raise ValueError(
                f"group_id {group_id!r}: a wake-up commits into a group of its own, {WAKE_GROUP_PREFIX}"
                "<pipeline>; never a group whose offsets are positions (eosflow.<pipeline>)"
            )
        if not commit_offset:
            raise ValueError("a wake-up that does not commit would fire on the same record for ever")
        super().__init__(commit_offset=True, **kwargs)
        self.group_id = group_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return f"{__name__}.{type(self).__qualname__}", {**kwargs, "group_id": self.group_id}

    async def run(self):
        from asgiref.sync import sync_to_async

        hook = _WakeConsumerHook(self.group_id, topics=self.topics, kafka_config_id=self.kafka_config_id)
        self._consumer = consumer = await sync_to_async(hook.get_consumer)()
        apply = import_string(self.apply_function or ARRIVED)
        process = sync_to_async(partial(apply, *self.apply_function_args, **self.apply_function_kwargs))
        while True:
            message = await sync_to_async(consumer.poll)(self.poll_timeout)
            if message is None:
                continue
            if error := message.error():
                if error.fatal():
                    raise RuntimeError(f"Kafka consumer error in group {self.group_id}: {error}")
                # A topic not created yet, a broker restarting: keep watching (the interval still runs).
                self.log.warning(
                    "group %s: %s; polling again in %ss", self.group_id, error, self.poll_interval
                )
                await asyncio.sleep(self.poll_interval)
                continue
            event = await process(message)
            if event:
                ends = await sync_to_async(_commit_the_ends)(consumer)
                self.log.info(
                    "records arrived in %s: wake-up; group %s now at %s", self.topics, self.group_id, ends
                )
                yield TriggerEvent(event)
                return
            await sync_to_async(consumer.commit)(message=message, asynchronous=False)
            await asyncio.sleep(self.poll_interval)


def wake_trigger(pipeline: Pipeline) -> PipelineWakeTrigger:
    return PipelineWakeTrigger(
        topics=list(pipeline.topics),
        group_id=wake_group_id(pipeline.name),
        apply_function=ARRIVED,
        kafka_config_id="kafka_default",  # eosflow's whole client configuration (airflow_local)
        poll_timeout=1,
        poll_interval=5,
    )
