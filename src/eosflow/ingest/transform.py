"""Kafka records -> typed order rows, or rejected rows with a reason: a pure DataFrame transform.

`transform_orders` takes a DataFrame shaped like Spark's Kafka batch source with
`includeHeaders=true` and returns every row once, checked, with both halves as lazy DataFrames,
`valid` and `rejected`. Every input row lands in exactly one of them: the split is on one
deterministic `error` column (NULL = valid), so re-running a batch gives the same rows, which the
exactly-once commit relies on.

Nothing here runs a Spark job (no collect/count/write); the caller decides when and where to write.

Checks, in order; the first one that fails is the row's only error:

1. ``null value``
2. ``oversized: <n> bytes > <max>``
3. ``not UTF-8``
4. ``not JSON`` (malformed, duplicate keys, trailing content, or not an object)
5. ``missing field: <name>`` (absent or JSON null)
6. ``mistyped field: <name> (expected <type>)``
7. ``invalid value: <name> (<why>)``

Strict typing: the value is parsed once into a VARIANT, which keeps the JSON type of every field.
`schema_of_variant` then tells a JSON integer (BIGINT) from a string "12" (STRING), from 1.5 or 1.0
(DECIMAL), 1e2 (DOUBLE), an integer too big for 64 bits (DECIMAL(20,0)) and true (BOOLEAN). Typed
extraction alone cannot: `try_variant_get(v, path, "bigint")` casts "12" to 12 and 1.5 to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# The producer defines the event contract; the checks here follow it rather than restate it.
from eosflow.produce.events import EVENT_TYPES, SCHEMA_VERSION

VALID_COLUMNS: list[tuple[str, str]] = [
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
    ("kafka_key", "string"),
    ("kafka_headers", "string"),
    ("event_id", "string"),
    ("event_type", "string"),
    ("event_time", "timestamp"),
    ("order_id", "string"),
    ("customer_id", "string"),
    ("amount_cents", "bigint"),
    ("currency", "string"),
    ("schema_version", "int"),
    ("batch_id", "string"),
    ("transform_version", "string"),
]

REJECTED_COLUMNS: list[tuple[str, str]] = [
    ("pipeline", "string"),
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
    ("raw_key", "binary"),
    ("raw_value", "binary"),
    ("error", "string"),
    ("batch_id", "string"),
]


@dataclass(frozen=True)
class _Field:
    name: str
    json_type: str  # the JSON type as schema_of_variant names it
    expected: str  # what the "mistyped field" error says was expected
    pattern: str | None = None  # a string field must also match this (Java regex, find semantics)


# rlike uses find(): anchor with ^ and \z, since $ would also accept a trailing "\n".
_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\z"
# An explicit zone is required: without one, the instant would depend on the session time zone.
_ISO_INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})\z"
_CURRENCY = r"^[A-Z]{3}\z"

# The required fields, in the order their errors are reported.
_FIELDS: tuple[_Field, ...] = (
    # Lower case only, so the business key (deduplicated downstream) has a single spelling.
    _Field("event_id", "STRING", "lower-case canonical UUID string", _UUID),
    _Field("event_type", "STRING", "string"),
    _Field(
        "event_time", "STRING", "ISO-8601 timestamp string with zone, e.g. 2026-01-01T00:00:00Z", _ISO_INSTANT
    ),
    _Field("order_id", "STRING", "string"),
    _Field("customer_id", "STRING", "string"),
    _Field("amount_cents", "BIGINT", "64-bit integer"),
    _Field("currency", "STRING", "string"),
    _Field("schema_version", "BIGINT", "integer"),
)

_DOC = "_doc"  # {"_": value} (VARIANT), NULL unless the value is exactly one JSON value
_RAW = "_raw_"  # prefix of the per-field VARIANT columns


def _decode_utf8(b: Column) -> Column:
    """Binary -> string, invalid UTF-8 sequences replaced by U+FFFD (keys and headers are not validated)."""
    return F.make_valid_utf8(b.cast("string"))


def _headers_json(headers: Column) -> Column:
    """Kafka headers as a JSON array of {"key", "value"}; "[]" when there are none."""
    pairs = F.transform(
        headers, lambda h: F.struct(h["key"].alias("key"), _decode_utf8(h["value"]).alias("value"))
    )
    # ignoreNullFields=false keeps {"value": null} for a header without a value instead of dropping it.
    return F.coalesce(F.to_json(pairs, {"ignoreNullFields": "false"}), F.lit("[]"))


def _wrapped_single_json(text: Column) -> Column:
    """`{"_": text}` as a VARIANT if `text` is exactly one JSON value, else NULL; the value is at `$._`.

    Spark's JSON parsers (try_parse_json, from_json, get_json_object) stop after the first value
    and ignore whatever follows, so '{"a":1} junk' and '{"a":1}{"b":2}' would pass. Wrapping the
    text proves nothing follows the value: with R the text after the first value, '[' text ']'
    has length 1 only if R is empty or starts with ']', and '{"_":' text '}' parses only if R is
    empty or starts with '}' or ','. Both hold only for an empty R. The array length is a
    streaming scan, so the value is still materialised only once. The fields are read through the
    wrapper (`$._.<name>`) rather than from a copy of the value extracted first: that copy would
    rebuild every record's VARIANT once more.
    """
    single = F.json_array_length(F.concat(F.lit("["), text, F.lit("]"))) == 1
    return F.when(single, F.try_parse_json(F.concat(F.lit('{"_":'), text, F.lit("}"))))


def _is_json_object(wrapped: Column) -> Column:
    """True if the wrapped value is a JSON object; casting to an empty struct yields NULL otherwise."""
    return F.try_variant_get(wrapped, "$._", "struct<>").isNotNull()


def _typed(field: _Field, raw: Column) -> Column:
    """The field's value as its Spark type, NULL if it does not have that type (never raises)."""
    if field.json_type == "BIGINT":
        return F.when(F.schema_of_variant(raw) == "BIGINT", F.try_variant_get(raw, "$", "bigint"))
    text = F.when(F.schema_of_variant(raw) == "STRING", F.try_variant_get(raw, "$", "string"))
    if field.pattern is not None:
        text = F.when(text.rlike(field.pattern), text)
    if field.name == "event_time":
        # try_cast: a well-formed but impossible date (2026-02-30) is NULL, not an ANSI error.
        # Digits beyond microseconds (Spark's and Postgres' precision) are truncated.
        return text.try_cast("timestamp")
    return text


def _invalid_reason(field: _Field, value: Column) -> Column | None:
    """Why a well-typed value is still unacceptable (NULL if it is fine); None: no rule for the field."""
    if field.name == "event_type":
        return F.when(~value.isin(*EVENT_TYPES), F.lit(f"not one of {', '.join(EVENT_TYPES)}"))
    if field.name == "amount_cents":
        return F.when(value <= 0, F.concat(F.lit("must be > 0, got "), value.cast("string")))
    if field.name == "currency":
        return F.when(~value.rlike(_CURRENCY), F.lit("must be 3 upper-case letters"))
    if field.name == "schema_version":
        return F.when(
            value != SCHEMA_VERSION, F.concat(F.lit(f"must be {SCHEMA_VERSION}, got "), value.cast("string"))
        )
    return None


def _first_error(max_value_bytes: int) -> Column:
    """The first failing check as a message, NULL when the row is valid.

    CASE WHEN stops at the first true branch; coalesce keeps field order within a rule and puts
    every missing field before any mistyped one, and every mistyped one before any invalid one.
    """
    value = F.col("value")
    size = F.length(value)  # bytes, for a binary column
    missing, mistyped, invalid = [], [], []
    for field in _FIELDS:
        raw, typed = F.col(_RAW + field.name), F.col(field.name)
        missing.append(F.when(raw.isNull() | F.is_variant_null(raw), F.lit(f"missing field: {field.name}")))
        mistyped.append(
            F.when(typed.isNull(), F.lit(f"mistyped field: {field.name} (expected {field.expected})"))
        )
        reason = _invalid_reason(field, typed)
        if reason is not None:
            invalid.append(F.concat(F.lit(f"invalid value: {field.name} ("), reason, F.lit(")")))
    return (
        F.when(value.isNull(), F.lit("null value"))
        .when(
            size > max_value_bytes,
            F.concat(F.lit("oversized: "), size.cast("string"), F.lit(f" bytes > {max_value_bytes}")),
        )
        .when(~F.is_valid_utf8(value.cast("string")), F.lit("not UTF-8"))
        .when(F.col(_DOC).isNull() | ~_is_json_object(F.col(_DOC)), F.lit("not JSON"))
        .otherwise(F.coalesce(*missing, *mistyped, *invalid))
    )


def _select_as(df: DataFrame, columns: list[tuple[str, str]]) -> DataFrame:
    """Select `columns` in order, cast to their declared types, so the schema matches the constants."""
    return df.select(*[F.col(name).cast(spark_type).alias(name) for name, spark_type in columns])


@dataclass(frozen=True)
class TransformResult:
    """Every input row once, in `checked`; `valid` and `rejected` are its two halves, both lazy.

    `checked` carries all columns of both halves and `error` (NULL = valid), so one pass over the
    source can write both; the halves have exactly VALID_COLUMNS and REJECTED_COLUMNS.
    """

    checked: DataFrame

    @property
    def valid(self) -> DataFrame:
        return _select_as(self.checked.where(F.col("error").isNull()), VALID_COLUMNS)

    @property
    def rejected(self) -> DataFrame:
        return _select_as(self.checked.where(F.col("error").isNotNull()), REJECTED_COLUMNS)


def transform_orders(
    df: DataFrame, *, pipeline: str, batch_id: str, transform_version: str, max_value_bytes: int
) -> TransformResult:
    """Split Kafka order records into typed `valid` rows and `rejected` rows (see module docstring)."""
    if max_value_bytes < 1:
        raise ValueError(f"max_value_bytes must be >= 1, got {max_value_bytes}")

    # Parse only values that passed the cheaper checks: an oversized value is never parsed.
    parseable = F.col("value").isNotNull() & (F.length("value") <= max_value_bytes)
    staged = (
        df.withColumn(_DOC, F.when(parseable, _wrapped_single_json(F.col("value").cast("string"))))
        .withColumns({_RAW + f.name: F.variant_get(F.col(_DOC), f"$._.{f.name}", "variant") for f in _FIELDS})
        .withColumns({f.name: _typed(f, F.col(_RAW + f.name)) for f in _FIELDS})
        .withColumn("error", _first_error(max_value_bytes))
    )
    checked = staged.select(
        F.lit(pipeline).alias("pipeline"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        _decode_utf8(F.col("key")).alias("kafka_key"),
        _headers_json(F.col("headers")).alias("kafka_headers"),
        *[F.col(f.name) for f in _FIELDS],
        F.col("key").alias("raw_key"),
        F.col("value").alias("raw_value"),
        F.col("error"),
        F.lit(batch_id).alias("batch_id"),
        F.lit(transform_version).alias("transform_version"),
    )
    # Left alone, the optimizer would push each split filter below this select by inlining the
    # error expression, parsing every value again inside the filter. A one-row generator is a
    # barrier it does not push through, so each output evaluates the checks once per row.
    return TransformResult(checked.select(F.inline(F.array(F.struct(*checked.columns)))))
