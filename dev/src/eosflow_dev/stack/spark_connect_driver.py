"""The stack's warm Spark Connect server: a Spark driver that only holds its SparkContext, whose Spark Connect
plugin serves the sessions (DESIGN.md "A warm Spark": two kinds of server). Started by spark-submit with the
configuration eosflow_dev.stack.spark_connect gives; Spark's own `SparkConnectServer` cannot be used, for it
always turns artifact isolation on, and with it a Python worker factory per session.

It ends when asked (SIGTERM), and when the JVM that started it is gone (a SIGKILLed server): a driver left
behind would hold nothing, but nothing should be left behind.
"""

from __future__ import annotations

import os
import signal
import threading


def main() -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()  # spark-submit's configuration: the plugin starts the service
    parent = os.getppid()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(1.0):
        if os.getppid() != parent:  # the JVM died without stopping us
            os._exit(0)
    spark.stop()


if __name__ == "__main__":
    main()
