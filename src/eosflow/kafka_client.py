"""One Kafka client configuration for every client eosflow makes: admin, producers, consumers, Spark.

The configuration is librdkafka's (confluent-kafka's) property map: `bootstrap.servers` plus whatever
the user's Kafka needs (`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
`ssl.ca.location`, ...). Spark's Kafka source runs the Java client, whose names differ for
credentials and trust stores: `spark_options` translates those, and passes the rest on as they are.
Functions that talk to Kafka take either a bootstrap string (the local stack, tests) or a whole map.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

KafkaConfig = Mapping[str, str]
T = TypeVar("T")

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
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
        self.client = None  # error_cb runs when the client is polled

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


def client_config(kafka: str | KafkaConfig, **extra: object) -> dict[str, object]:
    """The librdkafka configuration: a bootstrap string, or the whole map, plus `extra` settings."""
    config: dict[str, object] = {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)
    if not config.get("bootstrap.servers"):
        raise KafkaConfigError("the Kafka configuration has no bootstrap.servers")
    return config | extra


def bootstrap(kafka: str | KafkaConfig) -> str:
    """The brokers, for messages: never the credentials."""
    return kafka if isinstance(kafka, str) else str(kafka.get("bootstrap.servers", "?"))


def redacted(kafka: str | KafkaConfig) -> dict[str, object]:
    """The configuration with its secrets replaced, for logs."""
    return {k: ("***" if k in _SECRETS else v) for k, v in client_config(kafka).items()}


def spark_options(kafka: str | KafkaConfig) -> dict[str, str]:
    """The same configuration as Spark's Kafka source options (`kafka.`-prefixed Java client names)."""
    config = {k: str(v) for k, v in client_config(kafka).items()}
    java: dict[str, str] = {}
    username, password = config.pop("sasl.username", None), config.pop("sasl.password", None)
    mechanism = config.pop("sasl.mechanism", None) or config.pop("sasl.mechanisms", None)
    if mechanism:
        java["sasl.mechanism"] = mechanism.upper()
    if username is not None and "sasl.jaas.config" not in config:
        module = _LOGIN_MODULES.get((mechanism or "PLAIN").upper())
        if module is None:
            raise KafkaConfigError(
                f"sasl.mechanism {mechanism!r} with sasl.username: eosflow writes the Java client's "
                f"login for {', '.join(_LOGIN_MODULES)} only; give sasl.jaas.config for others"
            )
        java["sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quote(username)}" password="{_jaas_quote(password or "")}";'
        )
    if "ssl.ca.location" in config:  # a PEM file: the Java client reads it as a PEM trust store
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = config.pop("ssl.ca.location")
    for key in ("ssl.certificate.location", "ssl.key.location"):
        if key in config:
            raise KafkaConfigError(
                f"{key}: client certificates are not translated for Spark's Java client yet; "
                "use SASL, or give the Java client's ssl.keystore.* settings"
            )
    if "security.protocol" in config:
        config["security.protocol"] = config["security.protocol"].upper()
    java |= config
    return {f"kafka.{k}": v for k, v in java.items()}


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
