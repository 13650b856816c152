"""A warm Spark Connect server's code check (eosflow.spark.server_code) and its worker daemon's imports."""

from __future__ import annotations

import pytest

from eosflow.spark import code_archive, server_code, worker_daemon


def test_a_worker_of_the_runs_code_passes_and_of_other_code_refuses_naming_both() -> None:
    here = server_code.loaded()
    assert here == code_archive.code_digest()  # the digest the run's client computes, of the same files
    server_code.check(here)
    with pytest.raises(server_code.ServerCodeError) as refused:
        server_code.check("0123456789abcdef")
    message = str(refused.value)
    assert f"run eosflow code {here}, this run's code is 0123456789abcdef" in message
    assert "nothing was read or written" in message and "restart the server" in message


def test_the_worker_keeps_the_digest_of_what_it_imported_not_what_is_on_disk_now(monkeypatch) -> None:
    monkeypatch.setattr(server_code, "_loaded", "aaaaaaaaaaaaaaaa")  # the daemon's, taken before its fork
    monkeypatch.setattr(code_archive, "code_digest", lambda source=None: "bbbbbbbbbbbbbbbb")  # files changed
    assert server_code.loaded() == "aaaaaaaaaaaaaaaa"


def test_the_digest_is_the_archives_name(tmp_path) -> None:
    import dataclasses

    from eosflow import settings as settings_mod

    settings = settings_mod.load()
    archive = code_archive.package(dataclasses.replace(settings, state_dir=tmp_path))
    assert archive.name == f"eosflow-{code_archive.code_digest()}.zip"


class _Source:
    """A RecordSource that calls the function over one range's records, counting what is pulled."""

    def __init__(self) -> None:
        self.pulled = 0

    def records(self):
        for i in range(3):
            self.pulled += 1
            yield i

    def map(self, fn, ddl):
        return list(fn(self.records()))


def test_a_checked_source_refuses_before_a_record_is_pulled() -> None:
    source = _Source()
    with pytest.raises(server_code.ServerCodeError):
        server_code.Checked(source, "0123456789abcdef").map(lambda records: iter(list(records)), "id long")
    assert source.pulled == 0
    ours = server_code.Checked(source, server_code.loaded())
    assert ours.map(lambda records: iter(list(records)), "id long") == [0, 1, 2]


def test_the_daemon_imports_every_declarable_sinks_task_modules() -> None:
    from eosflow.sinks import registry

    modules = worker_daemon.modules()
    assert {"pyarrow", "eosflow.transform", "eosflow.sources.kafka.range_read"} <= set(modules)
    for kind in registry.kinds():
        assert set(registry.sink_class(kind).task_modules) <= set(modules), kind
