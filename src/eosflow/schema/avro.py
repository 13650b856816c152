"""Avro record values in the Confluent wire format, decoded with writer schemas from a schema registry.

A value is one magic byte 0, a 4-byte big-endian schema id, then the Avro binary encoding of one
datum under that (writer) schema. The schema comes from the registry's Confluent-compatible REST API
(`GET /schemas/ids/<id>`, with its references), once per id and process; fastavro decodes.

What is the record's fault becomes a rejected row's reason (no header, an id the registry does not
know, a schema that is not Avro, bytes that do not decode under it); a registry that cannot be
reached or refuses the credentials is not, and stops the run (`RegistryUnavailableError`), so that a
registry outage never turns good records into rejected ones.

confluent-kafka's own SchemaRegistryClient is not used at run time: its `schemaregistry` extra pulls
httpx2, authlib and cryptography into every Spark worker for the two GETs (and one POST) written here
with the standard library. The tests do use it, with confluent-kafka's serializers, to write records as a
user's producer does (the package index served that extra from November 2026; before, it lacked the
certifi release it needs).
"""

from __future__ import annotations

import base64
import io
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from datetime import time as time_of_day
from typing import TYPE_CHECKING, Any
from uuid import UUID

import fastavro

if TYPE_CHECKING:
    from eosflow.schema.types import Value

MAGIC = 0
HEADER_BYTES = 5
NO_HEADER = "not Avro: no Confluent wire-format header (magic byte 0 and a 4-byte schema id)"
# The settings EOSFLOW_SCHEMA_REGISTRY_CONFIG may hold, named as Confluent's clients name them.
CONFIG_KEYS = (
    "basic.auth.user.info",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "timeout.s",
)
_ATTEMPTS = 3  # a registry answering 5xx or timing out is asked again, then the run stops


class Rejection(str):
    """Why records under a schema id are rejected (a parsed schema may itself be a plain str)."""


class RegistryUnavailableError(RuntimeError):
    """The schema registry could not answer; a later retry may succeed (exit 1)."""


class RegistryAuthenticationError(RegistryUnavailableError):
    """The schema registry refused the credentials; a retry cannot help (exit 2)."""


@dataclass(frozen=True)
class RegistryConfig:
    """Where the schema registry is and how to reach it; shipped to Spark's Python tasks."""

    url: str  # the Confluent-compatible API's base, e.g. http://host:8081 or .../apis/ccompat/v7
    config: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # basic.auth.user.info, ...

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"schema registry URL {self.url!r} must be http(s)://host:port[/path], "
                "e.g. http://127.0.0.1:18081/apis/ccompat/v7"
            )
        if unknown := sorted({k for k, _ in self.config} - set(CONFIG_KEYS)):
            raise ValueError(f"schema registry setting(s) {unknown} unknown; known: {list(CONFIG_KEYS)}")

    @property
    def base(self) -> str:
        return self.url.rstrip("/")

    def option(self, name: str, default: str = "") -> str:
        return dict(self.config).get(name, default)


class SchemaRegistry:
    """The registry's writer schemas by id: fetched once per process, parsed for fastavro."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config

    @property
    def _context(self) -> ssl.SSLContext | None:
        # Made per request (a few per schema id and process), never kept: Spark pickles the decoder.
        return _ssl_context(self.config) if self.config.base.startswith("https") else None

    def get_json(self, path: str) -> dict | None:
        """GET base+path as JSON; None on 404; RegistryUnavailableError when it cannot answer."""
        request = urllib.request.Request(self.config.base + path, headers=self._headers())
        timeout = float(self.config.option("timeout.s", "10"))
        for attempt in range(_ATTEMPTS):
            try:
                with urllib.request.urlopen(request, timeout=timeout, context=self._context) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code in (401, 403):
                    raise RegistryAuthenticationError(
                        f"the schema registry at {self.config.base} refused the credentials (HTTP "
                        f"{exc.code}); set basic.auth.user.info in EOSFLOW_SCHEMA_REGISTRY_CONFIG"
                    ) from None
                problem = f"HTTP {exc.code}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as exc:
                problem = str(getattr(exc, "reason", exc))
            if attempt + 1 < _ATTEMPTS:
                time.sleep(0.5 * 2**attempt)
        raise RegistryUnavailableError(
            f"could not reach the schema registry at {self.config.base} ({problem}); check that it "
            "runs and EOSFLOW_SCHEMA_REGISTRY_URL, then retry: nothing was committed"
        )

    def register(self, subject: str, schema: dict) -> int:
        """Register Avro `schema` under `subject` (what a producer's serializer does); its schema id."""
        return self.register_text(subject, json.dumps(schema), "AVRO")

    def register_text(self, subject: str, schema: str, schema_type: str) -> int:
        """Register a schema as the registry holds it (Avro JSON, a Protobuf descriptor); its id."""
        body = json.dumps({"schema": schema, "schemaType": schema_type}).encode()
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        headers = {**self._headers(), "Content-Type": "application/vnd.schemaregistry.v1+json"}
        request = urllib.request.Request(self.config.base + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._context) as response:
                return int(json.loads(response.read())["id"])
        except urllib.error.HTTPError as exc:
            if exc.code not in (409, 422):
                raise RegistryUnavailableError(
                    f"could not register {subject!r} at the schema registry {self.config.base} "
                    f"(HTTP {exc.code})"
                ) from None
            from eosflow.errors import PipelineConfigError

            raise PipelineConfigError(
                f"the schema registry refused the {schema_type} schema for subject {subject!r} (HTTP "
                f"{exc.code}: {exc.read()[:300].decode('utf-8', 'replace')}): a schema it cannot read, or "
                "one incompatible with the subject's latest version (409). Nothing was produced. Declare "
                "columns compatibly (add optional ones at the end), or write to a new output_topic"
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise RegistryUnavailableError(
                f"could not register {subject!r} at the schema registry {self.config.base} "
                f"({getattr(exc, 'reason', exc)})"
            ) from None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        user_info = self.config.option("basic.auth.user.info")
        if user_info:
            headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
        return headers

    def writer_schema(self, schema_id: int) -> Rejection | str | list[Any] | dict[str, Any]:
        """The parsed Avro schema of `schema_id`, or the Rejection of every record under it."""
        key = (self.config, schema_id)
        found = _SCHEMAS.get(key)
        if found is None:
            found = _SCHEMAS[key] = self._fetch(schema_id)
        return found

    def _fetch(self, schema_id: int) -> Rejection | str | list[Any] | dict[str, Any]:
        answer = self.get_json(f"/schemas/ids/{schema_id}")
        if answer is None:
            return Rejection(
                f"not Avro: unknown schema id {schema_id} (the schema registry has no such schema)"
            )
        kind = answer.get("schemaType", "AVRO")
        if kind != "AVRO":
            return Rejection(f"not Avro: schema id {schema_id} is a {kind} schema")
        named: dict = {}
        try:
            for ref in answer.get("references") or []:
                self._add_reference(ref, named, depth=0)
            return fastavro.parse_schema(json.loads(answer["schema"]), named_schemas=named)
        except (ValueError, KeyError, TypeError, fastavro.schema.SchemaParseException) as exc:
            return Rejection(f"not Avro: schema id {schema_id} does not parse ({exc})")

    def _add_reference(self, ref: dict, named: dict, depth: int) -> None:
        if depth > 32:
            raise ValueError("schema references nested deeper than 32")
        subject = urllib.parse.quote(ref["subject"], safe="")
        answer = self.get_json(f"/subjects/{subject}/versions/{int(ref['version'])}")
        if answer is None:
            raise ValueError(f"reference {ref['subject']} version {ref['version']} not found")
        for inner in answer.get("references") or []:
            self._add_reference(inner, named, depth + 1)
        fastavro.parse_schema(json.loads(answer["schema"]), named_schemas=named)


# Writer schemas by (registry, id), for every check in this process: ids never change meaning.
_SCHEMAS: dict[tuple[RegistryConfig, int], Rejection | str | list[Any] | dict[str, Any]] = {}


def _ssl_context(config: RegistryConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.option("ssl.ca.location") or None)
    certificate = config.option("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(certificate, config.option("ssl.key.location") or None)
    return context


class AvroDecoder:
    """A value in the Confluent wire format -> (None, the record as JSON-like values) or (reason, None)."""

    def __init__(self, config: RegistryConfig, records_only: bool = True) -> None:
        self.registry = SchemaRegistry(config)
        self.records_only = records_only  # False: a key, which may be any Avro datum (a long, a string)

    def __call__(self, value: bytes) -> tuple[str | None, Value]:
        if len(value) < HEADER_BYTES or value[0] != MAGIC:
            return NO_HEADER, None
        schema_id = int.from_bytes(value[1:HEADER_BYTES], "big")
        writer = self.registry.writer_schema(schema_id)
        if type(writer) is Rejection:
            return str(writer), None
        buffer = io.BytesIO(value)
        buffer.seek(HEADER_BYTES)
        try:
            datum = fastavro.schemaless_reader(buffer, writer, None)
        except Exception as exc:  # noqa: BLE001 - any failure to decode is the record's, not the run's
            return f"not Avro: does not decode with schema id {schema_id} ({type(exc).__name__})", None
        if buffer.tell() != len(value):
            extra = len(value) - buffer.tell()
            return f"not Avro: {extra} bytes after the record (schema id {schema_id})", None
        if self.records_only and type(datum) is not dict:
            return f"not Avro: schema id {schema_id} is not a record schema", None
        return None, json_like(datum)


def json_like(value: Value) -> object:
    """A decoded Avro datum in the values JSON parsing gives, so one set of column checks serves both.

    Logical types become their text forms (an instant with its zone in UTC, a date, a UUID); a
    local-timestamp keeps no zone, so a timestamptz column refuses it as it would refuse such a JSON
    string. Decimals stay Decimal (exact), bytes stay bytes (no declared type takes them).
    """
    t = type(value)
    if t is dict:
        return {k: json_like(v) for k, v in value.items()}
    if t is list:
        return [json_like(v) for v in value]
    if t is datetime:
        if value.tzinfo is None:
            return value.isoformat()
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if t is date or t is time_of_day:
        return value.isoformat()
    if t is UUID:
        return str(value)
    return value


def encode(schema_id: int, parsed_schema: Value, record: Value) -> bytes:
    """A record in the Confluent wire format: what a Confluent Avro serializer writes."""
    buffer = io.BytesIO()
    buffer.write(bytes([MAGIC]) + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(buffer, parsed_schema, record)
    return buffer.getvalue()
