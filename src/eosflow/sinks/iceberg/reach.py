"""Reaching an Iceberg catalog and its object store: what fails there, said plainly and without secrets.

Every call into PyIceberg that talks to the catalog or the files runs inside `reaching`, which turns what
PyIceberg, requests, SQLAlchemy and pyarrow raise into eosflow's errors: IcebergUnavailableError (exit 1,
the catalog or the store did not answer: a retry may do) or IcebergAccessError (exit 2, refused
credentials, no such bucket, a configuration PyIceberg cannot use: fix it first). Their text has every
secret of the catalog's properties replaced by `***` (config.CatalogConfig.redact), and the original
exception is not chained (its text would be printed by a traceback). docs/DESIGN.md, "Iceberg sinks".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from eosflow.errors import SinkAccessError, SinkUnavailableError
from eosflow.sinks.iceberg.config import CatalogConfig

FIX_ACCESS = (
    "check the catalog's properties (EOSFLOW_ICEBERG_CATALOG_PROPERTIES, the iceberg_default connection's "
    "extra, or .pyiceberg.yaml): the credentials, the bucket and the endpoint"
)


class IcebergUnavailableError(SinkUnavailableError):
    """The Iceberg catalog or its object store did not answer; nothing was committed: retry when it does."""


class IcebergAccessError(SinkAccessError):
    """The Iceberg catalog or its object store refused: credentials, a bucket, or a configuration; nothing
    was committed: fix it, then run again."""


# Words an object store's or a server's refusal holds (S3's error codes, as pyarrow and the AWS SDK quote).
_REFUSED = (
    "accessdenied", "access_denied", "access denied", "invalidaccesskeyid", "signaturedoesnotmatch",
    "forbidden", "unauthorized", "nosuchbucket", "no such bucket", "bucket does not exist",
    "invalid_access_key", "credential", "permission denied",
)  # fmt: skip
_UNANSWERED = (
    "connection refused", "couldn't connect", "could not connect", "failed to connect", "timed out",
    "timeout", "name or service not known", "temporary failure in name resolution", "curlcode: 7",
    "curlcode: 28", "max retries exceeded", "connection reset", "network is unreachable",
)  # fmt: skip


@contextlib.contextmanager
def reaching(config: CatalogConfig, doing: str, after: str = "nothing was committed") -> Iterator[None]:
    """Run the block; what the catalog or the store raise becomes IcebergUnavailableError or
    IcebergAccessError naming `doing`, the catalog and `after` (what the failure leaves), every secret
    hidden. Other errors pass as they are."""
    try:
        yield
    except (IcebergUnavailableError, IcebergAccessError):
        raise
    except Exception as exc:  # noqa: BLE001 - sorted below; anything unrecognised is re-raised as it was
        kind = classify(exc)
        if kind is None:
            raise
        said = config.redact(f"{type(exc).__name__}: {exc}")[:600]
        where = config.describe()
        if kind is IcebergUnavailableError:
            message = f"{doing}: {where} did not answer ({said}); {after}. Retry once it answers"
        else:
            message = f"{doing}: {where} refused ({said}); {after}. Fix it: {FIX_ACCESS}"
        raise kind(message) from None


def classify(exc: BaseException) -> type[RuntimeError] | None:
    """Which of the two errors `exc` is, or None (not the catalog's or the store's doing)."""
    from pyiceberg import exceptions as ice

    if isinstance(exc, ice.CommitFailedException | ice.NoSuchTableError | ice.NoSuchNamespaceError):
        return None  # a fence, or a table not there yet: the callers decide
    if isinstance(exc, ice.UnauthorizedError | ice.ForbiddenError | ice.OAuthError):
        return IcebergAccessError
    if isinstance(exc, ice.ServiceUnavailableError):
        return IcebergUnavailableError
    text = f"{type(exc).__name__} {exc}".lower()
    if _is_connection_error(exc) or any(w in text for w in _UNANSWERED):
        return IcebergUnavailableError
    if isinstance(exc, OSError | ValueError | ice.RESTError) or any(w in text for w in _REFUSED):
        return IcebergAccessError if any(w in text for w in _REFUSED) or _configuration(exc) else None
    return None


def _is_connection_error(exc: BaseException) -> bool:
    try:
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import Timeout
    except ImportError:  # pragma: no cover - requests comes with PyIceberg
        return False
    from sqlalchemy.exc import InterfaceError, OperationalError

    return isinstance(exc, RequestsConnectionError | Timeout | OperationalError | InterfaceError)


def _configuration(exc: BaseException) -> bool:
    """PyIceberg's own refusal of a configuration (load_catalog's ValueErrors)."""
    text = str(exc).lower()
    return isinstance(exc, ValueError) and any(
        w in text for w in ("catalog", "uri missing", "property", "properties", "not a valid", "unsupported")
    )
