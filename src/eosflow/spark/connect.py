"""A run's session on a Spark Connect server (DESIGN.md, "A warm Spark"): one session per run, on a server
of the client's Spark minor; on an isolating server the run's code is shipped as a session artifact, on a
warm one its tasks run the server's installed eosflow, which they check is the run's own.

`eosflow.spark.session.get_spark` hands a run this session when `Settings.spark_remote` names a server; the
run stops it when its Spark work is done (eosflow.runners.job), so the server keeps nothing of it.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from eosflow.errors import StackError
from eosflow.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# How long a session waits for a server that does not answer, when it opens and mid-run: ~13 s, where the
# client's default waits 10 minutes. A restarted server does not know the session anyway (it lives in the
# server's memory), so waiting longer only delays the failure a retry of the run recovers from.
RETRY: dict[str, Any] = {
    "max_retries": 6,
    "initial_backoff": 200,
    "backoff_multiplier": 2.0,
    "max_backoff": 8000,
}
ISOLATION = "spark.sql.artifact.isolation.enabled"  # off: a warm server (one Python worker factory)
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"  # pyspark's switch between its local and remote sessions
# Runtime settings a run's session gets (the static ones, the UI and the JVM's, are the server's).
SESSION_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
}


# A warm server's sessions (artifact isolation off) and the code digest their tasks must find on the workers.
_INSTALLED: dict[str, str] = {}


class SparkConnectUnavailableError(RuntimeError):
    """The Spark Connect server did not answer when the run opened its session; nothing was read or
    written, and a retry may find it back."""


class SparkConnectVersionError(StackError):
    """The server's Spark is of another minor than this pyspark: the installation, not the run."""


def shown(url: str) -> str:
    """The server's URL as messages name it: sc://host:port, without its parameters (`/;token=...`)."""
    return url.split("/;", 1)[0]


def minor(version: str) -> str:
    """'4.3.0' -> '4.3': client and server must agree on it (Spark Connect's compatibility unit here)."""
    return ".".join(version.split(".")[:2])


def open_session(settings: Settings, app_name: str) -> SparkSession:
    """A new session on the server `settings.spark_remote` names, the server's Spark checked against this
    pyspark's minor: on an isolating server the run's code added as a pyfile artifact; on a warm one
    (artifact isolation off) nothing added, and the digest its tasks must find kept (`installed_code`)."""
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    from eosflow.spark import code_archive

    url = settings.spark_remote
    spark = SparkSession.builder.remote(url).create()  # no request yet: the first is spark.version
    spark.client.set_retry_policies([DefaultPolicy(**RETRY)])
    try:
        server = spark.version
        for key, value in SESSION_CONF.items():
            spark.conf.set(key, value)
        isolating = spark.conf.get(ISOLATION, "true") != "false"
    except Exception as exc:  # grpc's errors come wrapped in pyspark's, of several classes
        spark.release_session_on_close = False  # type: ignore[attr-defined]  # nothing to release there
        close(spark)
        status = re.search(r"StatusCode\.(\w+)", str(exc))
        why = status.group(1) if status else type(exc).__name__
        raise SparkConnectUnavailableError(
            f"the Spark Connect server at {shown(url)} did not answer ({why}"
            f" after {RETRY['max_retries']} retries); nothing was read or written. Start it (the stack's: "
            "eosflow stack up --with spark-connect), or unset EOSFLOW_SPARK_REMOTE (in Airflow: make "
            "spark_default a spark-submit connection) to start Spark in the run"
        ) from None
    if minor(server) != minor(pyspark.__version__):
        close(spark)
        here = pyspark.__version__
        raise SparkConnectVersionError(
            f"the Spark Connect server at {shown(url)} runs Spark {server} and this pyspark is {here}: "
            f"a run needs the same minor on both; install pyspark=={server} here or use a Spark "
            f"{minor(here)} server"
        )
    if isolating:
        # The code as it is now, on the Python workers' path for this session only (the spark-submit path
        # ships the same archive as --py-files): the server's own eosflow, if any, is not what this run runs.
        spark.addArtifacts(str(code_archive.package(settings)), pyfile=True)
    else:
        # A warm server would add an artifact to every session's path: its installed eosflow must be ours.
        _INSTALLED[spark.session_id] = code_archive.code_digest()  # type: ignore[attr-defined]
    return spark


def installed_code(spark: SparkSession) -> str | None:
    """The code digest a warm server's workers must run for this session's tasks; None where the session
    carries its own code (an isolating server, or a Spark of the run's own)."""
    return _INSTALLED.get(getattr(spark, "session_id", ""))


def close(spark: SparkSession) -> None:
    """End a run's session, and take this process out of Spark Connect mode: pyspark's builder sets
    SPARK_CONNECT_MODE_ENABLED for good, after which a local session asked for in the same process (a later
    run without a server, a test's) would be handed the remote one.

    The server is asked once to release the session, never retried: a server that is gone has nothing to
    release (the session died with it), and retrying as a run's actions retry doubled the time a run on a
    SIGKILLed server took to fail (27.6 s instead of 13.6 s). A live server expires a session it was not
    asked to release."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    _INSTALLED.pop(getattr(spark, "session_id", ""), None)
    try:
        spark.client.set_retry_policies([DefaultPolicy(max_retries=0)])
        spark.stop()
    finally:
        os.environ.pop(_CONNECT_MODE, None)
