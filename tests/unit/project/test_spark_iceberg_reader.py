"""The tests' Spark reader of Iceberg tables (tests/interop/spark_iceberg.py), the parts that need no Spark:
its pins agree with each other, its errors hide secrets, its child inherits nothing of ours, and eosflow
never imports it. tests/integration/test_iceberg_spark_reader.py reads real tables with it."""

from __future__ import annotations

import ast
import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from eosflow_dev.runtime import jars
from eosflow_dev.stack import settings as settings_mod
from tests.interop import spark_iceberg
from tests.interop.spark_iceberg import JARS, PYSPARK, RUNTIME_JAR, from_pyiceberg, jdbc_catalog, redact

REAL = settings_mod.load()
POM = REAL.root / "infra" / "maven" / JARS / "pom.xml"


def test_the_pinned_versions_agree_across_the_pom_the_lock_and_the_requirements() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(POM).getroot()
    assert pom.find("m:properties/m:iceberg.version", ns).text == spark_iceberg.ICEBERG
    locked = {path for path in jars.locked(REAL, JARS)}
    assert {RUNTIME_JAR, f"iceberg-aws-bundle-{spark_iceberg.ICEBERG}.jar", "postgresql-42.7.4.jar"} <= locked
    pins = re.findall(
        r"^(\S+)==(\S+) --hash=sha256:[0-9a-f]{64}$", spark_iceberg.REQUIREMENTS.read_text(), re.M
    )
    assert dict(pins) == {"pyspark": PYSPARK, "py4j": "0.10.9.9"}  # every package pinned, with its hash


def test_the_reader_jars_are_fetched_with_strict_checksums_by_a_pinned_plugin() -> None:
    assert "--strict-checksums" in jars.mvn_command(REAL, JARS, "mvn", Path("/tmp/out"))
    m = re.search(
        r"<artifactId>maven-dependency-plugin</artifactId>\s*<version>([\d.]+)</version>", POM.read_text()
    )
    assert m and tuple(int(x) for x in m.group(1).split(".")) >= (3, 8)


def test_an_error_shows_no_secret_property_nor_a_uris_password() -> None:
    properties = {
        "type": "rest",
        "uri": "jdbc:postgresql://app:p%40ss@db:5432/warehouse",
        "jdbc.password": "hunter2",
        "s3.secret-access-key": "AKsecret",
        "credential": "client:clientsecret",
        "warehouse": "s3://bucket/lake",
    }
    text = (
        "Failed to connect: jdbc:postgresql://app:p%40ss@db:5432/warehouse (p@ss)\n"
        "auth failed with hunter2, AKsecret, client:clientsecret\n"
        "at s3://bucket/lake"
    )
    shown = redact(text, properties)
    for secret in ("p%40ss", "p@ss", "hunter2", "AKsecret", "clientsecret"):
        assert secret not in shown, shown
    assert "jdbc:postgresql://app:***@db:5432/warehouse" in shown and "s3://bucket/lake" in shown


def test_the_childs_last_words_come_without_java_stack_frames() -> None:
    stderr = (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o52.sql.\n"
        ": org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: lake.x\n"
        "\tat org.apache.iceberg.jdbc.JdbcCatalog.loadTable(JdbcCatalog.java:1)\n"
        "\t... 22 more\n"
        "Caused by: java.net.UnknownHostException: nowhere\n"
        "\tat java.base/sun.nio.ch.NioSocketImpl.connect(NioSocketImpl.java:572)\n"
    )
    assert spark_iceberg._tail(stderr, {}).splitlines() == [
        "py4j.protocol.Py4JJavaError: An error occurred while calling o52.sql.",
        ": org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: lake.x",
        "Caused by: java.net.UnknownHostException: nowhere",
    ]


def test_the_child_inherits_no_spark_python_or_secret_from_this_process(monkeypatch) -> None:
    for name, value in {
        "SPARK_HOME": "/work/main/.venv/lib/python3.11/site-packages/pyspark",  # the project's 4.3
        "PYSPARK_SUBMIT_ARGS": "--jars x.jar pyspark-shell",
        "PYTHONPATH": "/elsewhere",
        "EOSFLOW_PG_PASSWORD": "hunter2",
        "AWS_SECRET_ACCESS_KEY": "AKsecret",
        "JAVA_HOME": "/usr/lib/jvm/java-17-openjdk-amd64",
    }.items():
        monkeypatch.setenv(name, value)
    env = spark_iceberg._child_env()
    assert env["JAVA_HOME"] == "/usr/lib/jvm/java-17-openjdk-amd64" and "PATH" in env
    assert not {"SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "PYTHONPATH", "EOSFLOW_PG_PASSWORD"} & set(env)
    assert "AWS_SECRET_ACCESS_KEY" not in env


def test_eosflows_sql_catalog_becomes_icebergs_jdbc_catalog_on_the_same_postgres_and_files(
    monkeypatch,
) -> None:
    monkeypatch.delenv("EOSFLOW_ICEBERG_WAREHOUSE", raising=False)
    s = dataclasses.replace(REAL, pg_host="db.internal", pg_port=6543, pg_database="wh", pg_user="u")
    assert jdbc_catalog(s) == {
        "type": "jdbc",
        "uri": "jdbc:postgresql://db.internal:6543/wh",
        "jdbc.user": "u",
        "jdbc.password": s.pg_password,
        "warehouse": (s.state_dir / "iceberg").as_uri(),
    }
    monkeypatch.setenv("EOSFLOW_ICEBERG_WAREHOUSE", "s3://lake/prefix")
    assert jdbc_catalog(s)["warehouse"] == "s3://lake/prefix"


@pytest.mark.parametrize("base", ["src", "plugins"])
def test_eosflow_never_imports_the_tests_reader(base) -> None:
    """A dev tool for the tests: the product stays free of it (and of anything under tests/)."""
    found = []
    for path in (REAL.root / base).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert found == []


def test_pyicebergs_sql_catalog_is_icebergs_jdbc_catalog_with_the_password_unquoted() -> None:
    java = from_pyiceberg(
        {
            "uri": "postgresql+psycopg://app:p%40ss%2Fw@db:6543/wh",
            "warehouse": "file:///lake",
            "py-io-impl": "x",
        }
    )
    assert java == {
        "type": "jdbc",
        "uri": "jdbc:postgresql://db:6543/wh",
        "jdbc.user": "app",
        "jdbc.password": "p@ss/w",
        "warehouse": "file:///lake",
    }


def test_a_rest_catalog_with_files_on_a_local_s3_server_gets_s3fileio_path_style_and_a_region() -> None:
    given = {
        "uri": "http://127.0.0.1:18181",
        "credential": "id:secret",
        "warehouse": "s3://lake/prefix",
        "s3.endpoint": "http://127.0.0.1:19000",
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
    }
    assert from_pyiceberg(given) == given | {
        "type": "rest",
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.path-style-access": "true",
        "client.region": "us-east-1",
    }
    virtual = from_pyiceberg(given | {"s3.force-virtual-addressing": "true", "s3.region": "eu-west-1"})
    assert virtual["s3.path-style-access"] == "false" and virtual["client.region"] == "eu-west-1"
    assert "s3.force-virtual-addressing" not in virtual and "s3.region" not in virtual


def test_a_sql_catalog_not_in_postgres_is_refused_by_name() -> None:
    with pytest.raises(spark_iceberg.ReaderError, match="Postgres only, not sqlite"):
        from_pyiceberg({"type": "sql", "uri": "sqlite:////tmp/catalog.db"})


def test_a_rest_catalog_given_by_its_uri_alone_is_named_rest_for_spark():
    """PyIceberg infers a REST catalog from an http uri; Iceberg's SparkCatalog does not (it takes an untyped
    catalog for Hive's metastore and fails on thrift), so the type must be written out."""
    from tests.interop.spark_iceberg import from_pyiceberg

    assert from_pyiceberg({"uri": "http://127.0.0.1:18181"}) == {
        "type": "rest",
        "uri": "http://127.0.0.1:18181",
    }
