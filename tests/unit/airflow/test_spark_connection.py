"""Which Spark the Spark tasks use is their connection's to say: spark-submit, or a Spark Connect server."""

from __future__ import annotations

import json

import pytest

from eosflow_airflow.hooks.eosflow import EosflowHook


@pytest.mark.parametrize(
    "connection, url",
    [
        ({"conn_type": "spark", "host": "local[2]"}, ""),
        ({"conn_type": "spark", "host": "yarn"}, ""),
        ({"conn_type": "spark_connect", "host": "spark.example", "port": 15002}, "sc://spark.example:15002/"),
        ({"conn_type": "spark", "host": "sc://spark.example:443"}, "sc://spark.example:443/"),
        (
            {"conn_type": "spark_connect", "host": "h", "port": 1, "login": "etl", "password": "s3cr:et"},
            "sc://h:1/;user_id=etl;token=s3cr%3Aet",
        ),
    ],
)
def test_the_connection_chooses_the_spark(monkeypatch, connection, url):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps(connection))
    monkeypatch.setenv("EOSFLOW_SPARK_REMOTE", "sc://the-workers-env:15002")  # never what chooses
    assert EosflowHook().spark_remote("spark_test") == url
