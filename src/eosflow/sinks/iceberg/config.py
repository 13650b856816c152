"""Which Iceberg catalog a sink's tables live in: configured as PyIceberg users configure one.

The catalog's name is EOSFLOW_ICEBERG_CATALOG (default `eosflow`). Its properties, each source overriding
the one before: PyIceberg's own configuration of that name (`.pyiceberg.yaml` in PYICEBERG_HOME, the home
folder or the working folder; PYICEBERG_CATALOG__<NAME>__<KEY> variables), then
EOSFLOW_ICEBERG_CATALOG_PROPERTIES (a JSON object; in Airflow, the `iceberg_default` connection's extra).
Properties that name neither a `uri` nor a `type` other than `sql` get the embedded default filled in: the
SQL catalog in the warehouse Postgres, files under EOSFLOW_ICEBERG_WAREHOUSE. docs/DESIGN.md, "Iceberg sinks".

The properties may hold secrets (a REST catalog's credential or token, object storage keys, the SQL
catalog's URI with the warehouse password): they are kept out of every repr, and `redact` takes them out of
any text that quotes PyIceberg, pyarrow or a server (see reach.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from eosflow.errors import PipelineConfigError
from eosflow.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

PROPERTIES_ENV = "EOSFLOW_ICEBERG_CATALOG_PROPERTIES"
DEFAULT_NAME = "eosflow"
# A property whose name holds one of these is a secret (PyIceberg's and Iceberg's own names: `credential`,
# `token`, `s3.secret-access-key`, `s3.session-token`, `jdbc.password`, `adls.account-key`, ...).
_SECRET_NAME = re.compile(r"password|secret|token|credential|key", re.IGNORECASE)
# Read from here by PyIceberg, never put in a message: a property holding a URI keeps only its password out.
_URI_NAMES = ("uri", "oauth2-server-uri")


@dataclass(frozen=True)
class CatalogConfig:
    """A catalog's name and properties, and where they came from (for messages)."""

    name: str
    properties: Mapping[str, str] = field(repr=False)
    source: str

    @classmethod
    def of(cls, settings: Settings) -> CatalogConfig:
        name = os.environ.get("EOSFLOW_ICEBERG_CATALOG", "eosflow") or DEFAULT_NAME
        configured = _pyiceberg_configuration(name)
        given = (
            _properties_env()
            if settings.iceberg_catalog_properties is None
            else dict(settings.iceberg_catalog_properties)
        )
        merged = {**configured, **given}
        sources = [s for s, p in (("PyIceberg's configuration", configured), (PROPERTIES_ENV, given)) if p]
        if _embedded(merged):
            merged = {**_embedded_default(settings), **merged}
            sources.insert(0, "the embedded SQL catalog")
        return cls(name, merged, " + ".join(sources))

    @property
    def kind(self) -> str:
        """rest, sql, glue, hive, ... as PyIceberg would infer it (its own rules, for messages only)."""
        if "py-catalog-impl" in self.properties:
            return self.properties["py-catalog-impl"]
        given = self.properties.get("type")
        if given:
            return given.lower()
        uri = self.properties.get("uri", "")
        return "rest" if uri.startswith("http") else "hive" if uri.startswith("thrift") else "sql"

    def describe(self) -> str:
        """The catalog as a message names it: kind, name and where it is, no secret."""
        where = self.redact(self.properties.get("uri", ""))
        return f"the {self.kind} Iceberg catalog '{self.name}'" + (f" at {where}" if where else "")

    def secrets(self) -> list[str]:
        """Every text a message must not hold: secret properties' values and URIs' passwords, also quoted."""
        found: set[str] = set()
        for key, value in self.properties.items():
            if not value:
                continue
            if _SECRET_NAME.search(key):
                found.add(value)
            if key in _URI_NAMES or "://" in value:
                password = urlsplit(value).password if "@" in value else None
                if password:
                    found |= {password, unquote(password)}
        found |= {quote(s, safe="") for s in found}
        return sorted((s for s in found if s), key=len, reverse=True)  # the longest first: no half-hidden

    def redact(self, text: str) -> str:
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

    def load(self) -> Catalog:
        """The catalog, through PyIceberg's own load_catalog (its type inferred as PyIceberg infers it)."""
        from pyiceberg.catalog import load_catalog

        return load_catalog(self.name, **dict(self.properties))


def _pyiceberg_configuration(name: str) -> dict[str, str]:
    """PyIceberg's configuration of the named catalog, read now (PyIceberg's own copy is read at import)."""
    from pyiceberg.utils.config import Config

    found = Config().get_catalog_config(name) or {}
    return {str(k): str(v) for k, v in found.items() if not isinstance(v, dict)}


def _properties_env() -> dict[str, str]:
    raw = os.environ.get(PROPERTIES_ENV, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str | int | bool) for v in value.values()):
        # Not quoted back: the text may hold a secret.
        raise PipelineConfigError(
            f"{PROPERTIES_ENV} is not a JSON object of PyIceberg catalog properties to strings (not shown: "
            'it may hold secrets). Write it like {"uri": "https://catalog.example/api", "credential": "..."}'
        )
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _embedded(properties: Mapping[str, str]) -> bool:
    """Nothing says which catalog: the SQL catalog in the warehouse fills in what is missing."""
    given = (properties.get("type") or "sql").lower()
    return "uri" not in properties and "py-catalog-impl" not in properties and given == "sql"


def _embedded_default(settings: Settings) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": _checked_uri(os.environ.get("EOSFLOW_ICEBERG_CATALOG_URI") or warehouse_uri(settings)),
        "warehouse": os.environ.get("EOSFLOW_ICEBERG_WAREHOUSE", (settings.state_dir / "iceberg").as_uri()),
    }


def warehouse_uri(settings: Settings) -> str:
    """The warehouse as a SQLAlchemy URL, each part quoted: a password with `@ : / % #` stays itself."""
    from sqlalchemy.engine import URL

    url = URL.create(
        "postgresql+psycopg",
        username=settings.pg_user,
        password=settings.pg_password,
        host=settings.pg_host,
        port=settings.pg_port,
        database=settings.pg_database,
    )
    return url.render_as_string(hide_password=False)


def _checked_uri(uri: str) -> str:
    """The URI, parsed once here: SQLAlchemy's own parse error would quote a piece of the password."""
    from sqlalchemy.engine import make_url

    try:
        make_url(uri)
    except Exception:
        raise PipelineConfigError(
            "EOSFLOW_ICEBERG_CATALOG_URI is not a SQLAlchemy URL (not shown: it may hold a password). "
            "Write it as dialect+driver://user:password@host:port/database, with the user and password "
            "percent-encoded (urllib.parse.quote(password, safe=''))"
        ) from None
    return uri
