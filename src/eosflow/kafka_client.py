"""One Kafka client configuration for every client eosflow makes: admin, producers, consumers (the
Spark tasks' range readers included).

The configuration is librdkafka's (confluent-kafka's) property map: `bootstrap.servers` plus whatever
the user's Kafka needs (`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
`ssl.ca.location`, `ssl.key.location`, ...), handed to every client as it is.
Functions that talk to Kafka take either a bootstrap string (the local stack, tests) or a whole map.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

KafkaConfig = Mapping[str, str]
T = TypeVar("T")

_SECRETS = ("sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password")


class KafkaConfigError(ValueError):
    """A client configuration eosflow cannot hand to every client; the message says what to change."""


class KafkaUnavailableError(RuntimeError):
    """Kafka could not be reached in time; the message names the brokers and the settings to check."""


class KafkaAuthenticationError(KafkaUnavailableError):
    """Kafka refused the client's credentials: no retry can help until the configuration changes."""


_WHERE = (
    "check EOSFLOW_KAFKA_BOOTSTRAP_SERVERS and EOSFLOW_KAFKA_CONFIG (in Airflow: the kafka_default "
    "connection's extra)"
)


class ErrorLog:
    """librdkafka's client-level errors (error_cb), kept so a timeout can say what went wrong."""

    def __init__(self) -> None:
        self.errors: list = []
        self.client: AdminClient | Producer | Consumer | None = None  # error_cb runs when it is polled

    def collect(self) -> list:
        if self.client is not None:
            self.client.poll(0)
        return self.errors

    def __call__(self, error) -> None:
        self.errors.append(error)

    def refused(self) -> bool:
        """Whether Kafka refused the client's credentials (no wait can change that)."""
        return any(e.code() == _AUTHENTICATION for e in self.collect())

    def answer(self, kafka: str | KafkaConfig, request: Callable[[float], T], timeout: float) -> T:
        """`request(seconds)`, asked again in short steps while Kafka does not answer: a refused login
        fails at once, an unreachable Kafka after `timeout` seconds (a restarting broker may be back by
        then). Any other error (an unknown topic, say) is the caller's to read."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + timeout
        while True:
            step = max(0.1, min(1.0, deadline - time.monotonic()))
            try:
                return request(step)
            except KafkaException as exc:
                waiting = exc.args[0].code() in _NO_ANSWER
                if self.refused() or (waiting and time.monotonic() >= deadline):
                    raise self.failure(kafka, exc) from None
                if not waiting:
                    raise

    def failure(self, kafka: str | KafkaConfig, exc: Exception) -> KafkaUnavailableError:
        """The error to raise for a request that failed with `exc`: authentication or reachability."""
        auth = next((e for e in self.collect() if e.code() == _AUTHENTICATION), None)
        if auth is not None:
            return KafkaAuthenticationError(
                f"Kafka at {bootstrap(kafka)} refused the client's credentials ({auth.str()}); {_WHERE}"
            )
        last = self.errors[-1].str() if self.errors else str(exc.args[0].str() if exc.args else exc)
        return KafkaUnavailableError(f"could not reach Kafka at {bootstrap(kafka)} ({last}); {_WHERE}")


_AUTHENTICATION = -169  # librdkafka's RD_KAFKA_RESP_ERR__AUTHENTICATION
# No answer yet: _TRANSPORT, _ALL_BROKERS_DOWN, _TIMED_OUT (what a short request meets while no broker is up).
_NO_ANSWER = (-195, -187, -185)


def admin_client(kafka: str | KafkaConfig):
    """An AdminClient on the configuration, and the ErrorLog its failures are explained from."""
    from confluent_kafka.admin import AdminClient

    errors = ErrorLog()
    errors.client = AdminClient(client_config(kafka, error_cb=errors, logger=_SILENT))
    return errors.client, errors


# librdkafka's own log lines (one per failed connection attempt, from its threads): what they say
# reaches the user once, in the error eosflow raises (ErrorLog), not interleaved with eosflow's lines.
_SILENT = logging.getLogger("eosflow.kafka_client.librdkafka")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def client_config(kafka: str | KafkaConfig, **extra: object) -> dict[str, Any]:
    """The librdkafka configuration: a bootstrap string, or the whole map, plus `extra` settings."""
    # Any: librdkafka's settings are strings and numbers, and callbacks (error_cb) and a logger too
    config: dict[str, Any] = {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)
    if not config.get("bootstrap.servers"):
        raise KafkaConfigError("the Kafka configuration has no bootstrap.servers")
    return config | extra


def bootstrap(kafka: str | KafkaConfig) -> str:
    """The brokers, for messages: never the credentials."""
    return kafka if isinstance(kafka, str) else str(kafka.get("bootstrap.servers", "?"))


def redacted(kafka: str | KafkaConfig) -> dict[str, object]:
    """The configuration with its secrets replaced, for logs."""
    return {k: ("***" if k in _SECRETS else v) for k, v in client_config(kafka).items()}
