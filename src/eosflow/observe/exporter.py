"""`eosflow metrics`: the metrics of /eosflow/metrics as a plain Prometheus exporter.

Airflow's /eosflow/metrics needs a login (a JWT that expires), which a Prometheus scrape config cannot renew.
This serves the same collector without one, bound to 127.0.0.1 by default: put it beside Prometheus, or
behind whatever guards your scrape targets. It reads as the read-only role, like the view.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, start_http_server

from eosflow.observe.metrics import PipelineCollector
from eosflow.observe.state import snapshot
from eosflow.pipelines import load_all
from eosflow.settings import Settings


def registry_for(settings: Settings) -> CollectorRegistry:
    """Each scrape reads pipelines.yml and one snapshot, so a new pipeline shows up without a restart."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(lambda: snapshot(settings, list(load_all(settings).values()))))
    return registry


def serve(settings: Settings, host: str, port: int, log: Callable[[str], None] = print) -> int:
    """Serve until SIGTERM or Ctrl-C; exit 0."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server, thread = start_http_server(port, addr=host, registry=registry_for(settings))
    log(
        f"metrics on http://{host}:{server.server_port}/metrics (read as {settings.pg_reader_user}); "
        "Ctrl-C stops"
    )
    stop.wait()
    server.shutdown()
    thread.join(timeout=10)
    log("metrics exporter stopped")
    return 0
