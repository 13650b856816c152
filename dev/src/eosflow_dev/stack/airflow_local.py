"""`eosflow airflow`: `airflow standalone` wired to the local stack.

AIRFLOW_HOME lives in the state folder; DAGs and plugins come from the project; connections are
provisioned through AIRFLOW_CONN_* variables built from the same settings as everything else, so
there is no second place to configure the stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from eosflow_dev.stack import secret_files
from eosflow_dev.stack.settings import StackSettings

ADMIN_USER = "admin"


def passwords_file(settings: StackSettings) -> Path:
    return settings.airflow_home / "passwords.json"


def admin_password(settings: StackSettings) -> str:
    """The admin password, generated once per AIRFLOW_HOME and kept in passwords.json."""
    path = passwords_file(settings)
    if path.exists():
        return json.loads(path.read_text())[ADMIN_USER]
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    secret_files.write_secret(path, json.dumps({ADMIN_USER: password}) + "\n")
    return password


def connections(settings: StackSettings) -> dict[str, str]:
    """AIRFLOW_CONN_* values; an operator's own AIRFLOW_CONN_* in the environment wins."""
    conns = {
        # Without this the Spark provider silently falls back to YARN. With EOSFLOW_SPARK_REMOTE (the CLI's
        # Spark Connect server) the tasks use that server, as the CLI's runs do (DESIGN.md "A warm Spark").
        "AIRFLOW_CONN_SPARK_DEFAULT": (
            {
                "conn_type": "spark_connect",
                "host": settings.spark_remote.split("/;", 1)[0],
            }  # the stack's: no token
            if settings.spark_remote
            else {"conn_type": "spark", "host": os.environ.get("EOSFLOW_SPARK_MASTER", "local[2]")}
        ),
        "AIRFLOW_CONN_KAFKA_DEFAULT": {
            "conn_type": "kafka",
            "extra": settings.kafka,  # the whole client configuration (the Kafka provider's form)
        },
        "AIRFLOW_CONN_WAREHOUSE": {
            "conn_type": "postgres",
            "host": settings.pg_host,
            "port": settings.pg_port,
            "schema": settings.pg_database,
            "login": settings.pg_user,
            "password": settings.pg_password,
            "extra": dict(settings.pg_options),  # sslmode, sslrootcert, ...
        },
        # The read-only role of the eosflow view and the metrics (EosflowHook.reader_settings).
        "AIRFLOW_CONN_WAREHOUSE_READONLY": {
            "conn_type": "postgres",
            "host": settings.pg_host,
            "port": settings.pg_port,
            "schema": settings.pg_database,
            "login": settings.pg_reader_user,
            "password": settings.pg_reader_password,
            "extra": dict(settings.pg_options),
        },
    }
    return {name: os.environ.get(name) or json.dumps(value) for name, value in conns.items()}


EOSFLOW_BUNDLE = {"name": "eosflow", "classpath": "eosflow_airflow.bundle.EosflowDagBundle", "kwargs": {}}
# Airflow's default: the DAGs folder ([core] dags_folder).
DAGS_FOLDER_BUNDLE = {
    "name": "dags-folder",
    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
    "kwargs": {},
}
BUNDLES = [DAGS_FOLDER_BUNDLE, EOSFLOW_BUNDLE]


def airflow_env(settings: StackSettings) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(settings.airflow_home),
            # eosflow's DAGs as a team's Airflow gets them, the installed package's bundle, beside the DAGs
            # folder, the project's dags/ (docs/operations/airflow.md).
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(BUNDLES),
            "AIRFLOW__CORE__DAGS_FOLDER": str(settings.root / "dags"),
            # The eosflow view comes by its entry point (airflow.plugins), as in a team's Airflow; this folder
            # is for plugins of your own (pointing it at plugins/ would load the view twice).
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(settings.airflow_home / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # Ingest DAGs are meant to run on their schedule as soon as they appear.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__PARALLELISM": os.environ.get("AIRFLOW__CORE__PARALLELISM", "4"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file(settings)),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(settings.airflow_port),
            # Task workers report to the API server; without this they call the default port 8080.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{settings.airflow_port}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            # spark-submit and the eosflow CLI must be the venv's.
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            "EOSFLOW_HOME": str(settings.root),
        }
    )
    env.update(connections(settings))
    return env


def announce(settings: StackSettings, log=print) -> None:
    """Where the UI is and how to log in: the file that holds the password, never the password, which
    a terminal's scrollback or a captured log would keep."""
    admin_password(settings)  # made now if this AIRFLOW_HOME has none
    log(f"airflow UI: http://127.0.0.1:{settings.airflow_port}  user {ADMIN_USER}")
    log(
        f"(its password is in {passwords_file(settings)}, mode 0600; AIRFLOW_HOME is {settings.airflow_home})"
    )


def start(
    settings: StackSettings, log=print, extra_env: dict[str, str] | None = None, **popen_kwargs
) -> subprocess.Popen:
    """Start `airflow standalone` in its own process group and return at once."""
    announce(settings, log)
    airflow = str(Path(sys.executable).parent / "airflow")
    env = airflow_env(settings) | (extra_env or {})
    return subprocess.Popen([airflow, "standalone"], env=env, start_new_session=True, **popen_kwargs)


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: stop Airflow as Ctrl-C does."""


def stop_timeout() -> float:
    """Seconds Airflow gets to stop before what is left of its process group is killed (default 30)."""
    raw = os.environ.get("EOSFLOW_AIRFLOW_STOP_TIMEOUT", "").strip()
    try:
        return float(raw) if raw and float(raw) > 0 else 30.0
    except ValueError:
        return 30.0


def _group_alive(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def _named(pids: list[int]) -> str:
    """pid (command line) of each, for a log line that says what did not stop."""
    named = []
    for pid in pids:
        try:
            command = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            command = "ended"
        named.append(f"{pid} ({command.strip()[:80]})")
    return ", ".join(named)


def stop_group(proc: subprocess.Popen, timeout: float | None = None, log=print) -> None:
    """SIGTERM Airflow's whole process group, wait until none of it is left, SIGKILL the rest after timeout.

    Waits for the group, not only for `airflow standalone`: its scheduler, API server, dag processor
    and triggerer are its children in the same group and can outlive it.
    """
    pgid = proc.pid  # start_new_session: the leader's pid is the group's id
    timeout = stop_timeout() if timeout is None else timeout
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, or it stays a zombie member of the group
        if not _group_alive(pgid):
            break
        time.sleep(0.2)
    else:
        left = _group_alive(pgid)
        log(f"airflow did not stop in {timeout:g}s: killing {len(left)} process(es): {_named(left)}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        # A SIGKILL lands a moment after killpg returns: wait until it has, so nothing of the group
        # (a port, a lock file) outlives the return.
        killed_by = time.monotonic() + 5
        while time.monotonic() < killed_by:
            proc.poll()
            if not _group_alive(pgid):
                break
            time.sleep(0.05)
    proc.wait()


def serve(settings: StackSettings, log=print) -> int:
    """Run in the foreground until Airflow exits, Ctrl-C, SIGTERM or SIGHUP.

    `airflow standalone` runs in a session of its own (a Ctrl-C in the terminal reaches only us, and
    we decide how it stops), so a signal to eosflow alone reaches none of it: on any of these, stop its
    whole process group and exit 0. A second signal while stopping is ignored; the stop is bounded
    by EOSFLOW_AIRFLOW_STOP_TIMEOUT (30 s), after which the rest is killed.
    """
    proc: subprocess.Popen | None = None
    pending: list[int] = []

    def on_signal(signum, _frame):
        if proc is None:
            pending.append(signum)  # arrived during start-up: handled as soon as Airflow is started
            return
        raise _Stop(signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    # SIGINT too, rather than trusting the handler we were given to raise KeyboardInterrupt: a parent may
    # have left it ignored (a job started with & in a script), or another library replaced it.
    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        try:
            proc = start(settings, log=log)
            if pending:
                raise _Stop(pending[0])
            return proc.wait()
        except (KeyboardInterrupt, _Stop) as exc:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)  # the stop below is bounded; let it finish
            name = signal.Signals(exc.args[0]).name if isinstance(exc, _Stop) else "SIGINT"
            log(f"{name}: stopping airflow")
            if proc is not None:
                stop_group(proc, log=log)
            log("airflow stopped")
            return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
