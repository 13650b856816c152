"""The two connection types eosflow adds to Airflow (none of its providers has them), each with its hook.

`eosflow_schema_registry`: the schema registry Avro and Protobuf pipelines decode with (a Confluent-compatible
API). `eosflow_iceberg`: the Iceberg catalog of `sink: iceberg` pipelines, as PyIceberg properties. Both are
read when a task runs (eosflow_airflow.hooks.eosflow.EosflowHook.settings), never when a DAG file is parsed.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.hook import BaseHook

REGISTRY_CONN_ID = "eosflow_schema_registry"
ICEBERG_CONN_ID = "iceberg_default"


def defined_connection(conn_id: str) -> Any | None:
    """The connection, or None when it is not defined (the worker's environment stands)."""
    try:
        return BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - Airflow raises its own not-found error, by version
        return None


def _strings(extra: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in extra.items()}


class SchemaRegistryHook(BaseHook):
    """The schema registry: host is its URL, login and password its basic auth, extra the client's other
    settings (confluent-kafka's SchemaRegistryClient: ssl.ca.location, ssl.certificate.location, ...)."""

    conn_name_attr = "registry_conn_id"
    default_conn_name = REGISTRY_CONN_ID
    conn_type = "eosflow_schema_registry"
    hook_name = "Schema registry (eosflow)"

    def __init__(self, registry_conn_id: str = REGISTRY_CONN_ID) -> None:
        super().__init__()
        self.registry_conn_id = registry_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {
                "host": "Registry URL",
                "login": "Basic auth user",
                "password": "Basic auth password",
            },
            "placeholders": {
                "host": "https://registry.example.com:8081",
                "extra": '{"ssl.ca.location": "/etc/ssl/certs/ca.pem"}',
            },
        }

    def client_settings(self) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        """(URL, client settings) from the connection, or None when it is not defined."""
        conn = defined_connection(self.registry_conn_id)
        if conn is None or not conn.host:
            return None
        config = _strings(dict(conn.extra_dejson))
        if conn.login:
            config["basic.auth.user.info"] = f"{conn.login}:{conn.password or ''}"
        return str(conn.host), tuple(sorted(config.items()))


class IcebergCatalogHook(BaseHook):
    """The Iceberg catalog as PyIceberg properties: host is its `uri`, extra any other property; the password
    goes to the property the extra's `password_property` names, else, with a login, to `credential` as
    login:password (a REST catalog's OAuth2 client credentials)."""

    conn_name_attr = "iceberg_conn_id"
    default_conn_name = ICEBERG_CONN_ID
    conn_type = "eosflow_iceberg"
    hook_name = "Iceberg catalog (eosflow)"

    def __init__(self, iceberg_conn_id: str = ICEBERG_CONN_ID) -> None:
        super().__init__()
        self.iceberg_conn_id = iceberg_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {"host": "Catalog URI", "login": "Client id (OAuth2)", "password": "Client secret"},
            "placeholders": {
                "host": "https://catalog.example.com/api/catalog",
                "extra": '{"type": "rest", "warehouse": "analytics", "s3.endpoint": "https://s3.example.com"}',
            },
        }

    def catalog_properties(self) -> tuple[tuple[str, str], ...] | None:
        """The catalog's PyIceberg properties, or None when the connection is not defined."""
        conn = defined_connection(self.iceberg_conn_id)
        if conn is None:
            return None
        extra = dict(conn.extra_dejson)
        target = str(extra.pop("password_property", "") or "")
        properties = _strings(extra)
        if conn.host:
            properties.setdefault("uri", conn.host)
        if conn.password and target:
            properties[target] = conn.password
        elif conn.password and conn.login:
            properties["credential"] = f"{conn.login}:{conn.password}"
        return tuple(sorted(properties.items()))
