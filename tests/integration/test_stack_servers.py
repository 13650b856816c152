"""The stack's optional servers for real: Iceberg's REST catalog and S3Proxy, each on free ports with a
state folder of its own (never the dev stack's), started, restarted with their state, and stopped."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs as pafs

from eosflow_dev.stack import optional
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.iceberg_rest import IcebergRestService
from eosflow_dev.stack.process import pid_alive
from eosflow_dev.stack.s3_server import S3Service, filesystem

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def private(tmp_path):
    """Settings of a private stack: its own state folder and ports; the servers stopped afterwards."""
    settings = dataclasses.replace(
        settings_mod.load(),
        state_dir=tmp_path / "state",
        iceberg_rest_port=_free_port(),
        s3_port=_free_port(),
    )
    yield settings
    for svc in reversed(optional.services(settings)):
        svc.stop(log=lambda msg: None)


def _env(settings) -> dict[str, str]:
    return dict(
        os.environ,
        EOSFLOW_STATE_DIR=str(settings.state_dir),
        EOSFLOW_ICEBERG_REST_PORT=str(settings.iceberg_rest_port),
        EOSFLOW_S3_PORT=str(settings.s3_port),
    )


def _eosflow(settings, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eosflow.cli", *args],
        env=_env(settings),
        capture_output=True,
        text=True,
        timeout=180,
    )


def _processes_naming(folder: Path) -> list[int]:
    """Every live process whose command line names `folder`: none may be left after a stop."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(folder) in cmdline and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _stopped_cleanly(svc, pid: int, port: int) -> None:
    svc.stop(log=lambda msg: None)
    assert svc.pid() is None and not pid_alive(pid)
    assert _processes_naming(svc.home) == []
    # Nothing listens there any more. (Not port_is_free: the port came from the ephemeral range, and a client
    # socket of another test may hold it once the server let it go: a fresh clone's run saw exactly that.)
    assert not _listening(port)


def _listening(port: int) -> bool:
    import psutil

    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in psutil.net_connections("tcp"))


def test_s3_server_answers_signed_requests_and_keeps_objects_across_a_restart(private):
    svc = S3Service(private)
    started = time.monotonic()
    details = optional.s3(private, log=lambda msg: None)
    print(f"s3 start: {time.monotonic() - started:.1f} s")  # measured for the docs (-s shows it)
    assert details.endpoint == f"http://127.0.0.1:{private.s3_port}" and details.bucket == "eosflow"
    assert svc.healthy()
    s3 = filesystem(details)
    assert s3.get_file_info(pafs.FileSelector("eosflow", recursive=True)) == []  # a signed listing

    with s3.open_output_stream("eosflow/kept/object.txt") as out:
        out.write(b"stays")
    first = svc.pid()
    _stopped_cleanly(svc, first, private.s3_port)
    with pytest.raises(OSError):
        s3.get_file_info("eosflow/kept/object.txt")  # really down: nothing answers

    again = optional.s3(private, log=lambda msg: None)
    assert again == details  # the same credentials after a restart
    assert svc.pid() not in (None, first)
    with filesystem(again).open_input_stream("eosflow/kept/object.txt") as kept:
        assert kept.read() == b"stays"


def test_s3_server_refuses_a_wrong_secret_and_names_a_missing_bucket(private):
    details = optional.s3(private, log=lambda msg: None)
    with filesystem(details).open_output_stream("eosflow/object.txt") as out:
        out.write(b"private")

    forged = dataclasses.replace(details, secret_key=details.secret_key[:-4] + "AAAA")
    with pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH|ACCESS_DENIED"):
        filesystem(forged).get_file_info(pafs.FileSelector("eosflow"))
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        filesystem(forged).open_input_stream("eosflow/object.txt").read()
    with pytest.raises(OSError, match="NO_SUCH_BUCKET"):
        filesystem(details).get_file_info(pafs.FileSelector("no-such-bucket"))


def test_s3_credentials_are_0600_files_made_once_and_never_on_a_command_line(private):
    svc = S3Service(private)
    details = optional.s3(private, log=lambda msg: None)
    for secret_file in (svc.credentials_file, svc.properties_file):
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        assert details.secret_key in secret_file.read_text()
    cmdline = Path(f"/proc/{svc.pid()}/cmdline").read_bytes().decode(errors="replace")
    assert details.secret_key not in cmdline
    assert details.secret_key not in repr(details)
    assert len(details.secret_key) >= 40  # 32 random bytes, url-safe
    # A second private stack makes a secret of its own.
    other = dataclasses.replace(private, state_dir=private.state_dir.parent / "other")
    assert S3Service(other).details().secret_key != details.secret_key


def test_a_bucket_asked_for_while_the_server_runs_is_made(private):
    optional.s3(private, log=lambda msg: None)
    later = dataclasses.replace(private, s3_bucket="asked-later")
    details = optional.s3(later, log=lambda msg: None)
    assert details.bucket == "asked-later"
    assert filesystem(details).get_file_info(pafs.FileSelector("asked-later")) == []


def test_the_secret_is_in_no_log_line_and_not_in_stack_status(private):
    """Through the CLI: status lists the optional servers, and neither it, `stack logs`, eosflow's own
    log lines nor the servers' logs (the S3 server refused a forged request meanwhile) hold the secret."""
    lines: list[str] = []
    details = optional.s3(private, log=lines.append)
    optional.iceberg_rest(dataclasses.replace(private, iceberg_rest_storage="s3"), log=lines.append)
    forged = dataclasses.replace(details, secret_key="x" * 43)
    with pytest.raises(OSError):
        filesystem(forged).get_file_info(pafs.FileSelector("eosflow"))

    status = _eosflow(private, "stack", "status")
    rows = {line.split()[0]: line for line in status.stdout.splitlines()}
    assert "healthy" in rows["s3"] and f"bucket {details.bucket}" in rows["s3"]
    assert "healthy" in rows["iceberg-rest"]
    logs = _eosflow(private, "stack", "logs", "-n", "500")
    assert f"==> {private.state_dir / 's3' / 's3.log'} <==" in logs.stdout and "Started" in logs.stdout
    printed = [*lines, status.stdout, status.stderr, logs.stdout, logs.stderr]
    printed += [p.read_text() for p in private.state_dir.rglob("*.log")]
    assert lines and [text for text in printed if details.secret_key in text] == []


def test_iceberg_rest_keeps_a_namespace_and_a_table_across_a_restart(private):
    from pyiceberg.catalog import load_catalog

    svc = IcebergRestService(private)
    started = time.monotonic()
    rest = optional.iceberg_rest(private, log=lambda msg: None)
    print(f"iceberg-rest start: {time.monotonic() - started:.1f} s")
    with urllib.request.urlopen(f"{rest.uri}/v1/config", timeout=5) as answer:
        assert answer.status == 200 and "endpoints" in json.load(answer)
    assert rest.warehouse == (private.state_dir / "iceberg-rest" / "warehouse").as_uri()

    create = urllib.request.Request(
        f"{rest.uri}/v1/namespaces",
        data=json.dumps({"namespace": ["kept_ns"], "properties": {}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(create, timeout=10) as answer:
        assert answer.status == 200
    catalog = load_catalog("rest", type="rest", uri=rest.uri)
    table = catalog.create_table("kept_ns.events", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    assert table.metadata_location.startswith(rest.warehouse.replace("file:///", "file:/"))

    _stopped_cleanly(svc, svc.pid(), private.iceberg_rest_port)
    assert svc.catalog_db.exists()
    optional.ensure(private, "iceberg-rest", log=lambda msg: None)
    with urllib.request.urlopen(f"{rest.uri}/v1/namespaces", timeout=10) as answer:
        assert ["kept_ns"] in json.load(answer)["namespaces"]
    again = load_catalog("rest", type="rest", uri=rest.uri)
    assert sorted(again.load_table("kept_ns.events").scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_iceberg_rest_can_keep_its_tables_in_the_stack_s3_server(private):
    from pyiceberg.catalog import load_catalog

    on_s3 = dataclasses.replace(private, iceberg_rest_storage="s3")
    rest = optional.iceberg_rest(on_s3, log=lambda msg: None)  # starts the S3 server first
    details = optional.s3(on_s3, log=lambda msg: None)
    assert rest.warehouse == "s3://eosflow/iceberg-rest"
    catalog = load_catalog(
        "rest",
        type="rest",
        uri=rest.uri,
        **{
            "s3.endpoint": details.endpoint,
            "s3.region": details.region,
            "s3.access-key-id": details.access_key,
            "s3.secret-access-key": details.secret_key,
        },
    )
    catalog.create_namespace("on_s3")
    table = catalog.create_table("on_s3.events", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [7]}))
    # The server wrote the metadata through S3FileIO: it is an object in the S3 server's bucket.
    assert table.metadata_location.startswith("s3://eosflow/iceberg-rest/on_s3/events/metadata/")
    found = filesystem(details).get_file_info(pafs.FileSelector("eosflow/iceberg-rest/on_s3", recursive=True))
    assert any(info.path.endswith(".metadata.json") for info in found)
    assert any(info.path.endswith(".parquet") for info in found)


def test_stack_down_stops_the_optional_servers_whatever_was_asked(private):
    optional.s3(private, log=lambda msg: None)
    optional.ensure(private, "iceberg-rest", log=lambda msg: None)
    down = _eosflow(private, "stack", "down")
    assert down.returncode == 0, down.stderr
    assert "stopping the Iceberg REST catalog" in down.stderr and "stopping the S3 server" in down.stderr
    assert _processes_naming(private.state_dir) == []
    status = _eosflow(private, "stack", "status")
    rows = {line.split()[0]: line for line in status.stdout.splitlines()}
    assert "not started" in rows["s3"] and "not started" in rows["iceberg-rest"]


def test_an_unknown_optional_server_is_refused_before_anything_starts(private):
    out = _eosflow(private, "stack", "up", "--with", "s3,minio")
    assert out.returncode == 2, out.stderr
    assert "no optional stack service minio" in out.stderr and "choose from s3, iceberg-rest" in out.stderr
    assert _processes_naming(private.state_dir) == []


def test_the_fixtures_start_the_servers_on_the_project_settings(iceberg_rest, s3_server, settings):
    """The fixtures other tests use: the dev stack's own ports and state folder."""
    assert iceberg_rest.uri == f"http://{settings.kafka_host}:{settings.iceberg_rest_port}"
    assert s3_server.endpoint == f"http://{settings.kafka_host}:{settings.s3_port}"
    assert filesystem(s3_server).get_file_info(s3_server.bucket).type == pafs.FileType.Directory
    with urllib.request.urlopen(f"{iceberg_rest.uri}/v1/config", timeout=5) as answer:
        assert answer.status == 200
