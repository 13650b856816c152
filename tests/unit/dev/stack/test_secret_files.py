"""Files holding a secret are 0600 from their first byte, and never written through a planted link."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from eosflow.errors import StackError
from eosflow_dev.stack import airflow_local, kafka, postgres
from eosflow_dev.stack import settings as settings_mod
from eosflow_dev.stack.secret_files import write_secret


@pytest.fixture
def open_umask():
    """The widest umask: what the process's umask would let through, a secret file must not."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _settings(tmp_path: Path) -> settings_mod.StackSettings:
    return dataclasses.replace(
        settings_mod.load(), state_dir=tmp_path / "state", kafka_sasl_password="s3cret"
    )


def test_a_new_file_is_0600(tmp_path, open_umask) -> None:
    path = tmp_path / "secret"
    write_secret(path, "hush\n")
    assert (_mode(path), path.read_text()) == (0o600, "hush\n")


def test_a_file_left_0644_is_replaced_not_reused(tmp_path, open_umask) -> None:
    path = tmp_path / "secret"
    path.write_text("old\n")
    path.chmod(0o644)
    with path.open() as earlier:  # someone opened it while it was readable to all
        write_secret(path, "hush\n")
        assert earlier.read() == "old\n"  # what they hold never shows the new secret
    assert (_mode(path), path.read_text()) == (0o600, "hush\n")


def test_a_planted_symlink_is_refused_and_its_target_untouched(tmp_path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("theirs\n")
    path = tmp_path / "secret"
    path.symlink_to(target)
    with pytest.raises(StackError, match="symbolic link.*remove it"):
        write_secret(path, "hush\n")
    assert target.read_text() == "theirs\n" and path.is_symlink()


def test_a_dangling_symlink_is_refused_and_creates_nothing(tmp_path) -> None:
    path = tmp_path / "secret"
    path.symlink_to(tmp_path / "made-through-the-link")
    with pytest.raises(StackError):
        write_secret(path, "hush\n")
    assert not (tmp_path / "made-through-the-link").exists()


def test_no_temporary_file_is_left_behind(tmp_path) -> None:
    write_secret(tmp_path / "secret", "hush\n")
    write_secret(tmp_path / "secret", "again\n")
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]


def test_kafka_server_properties_is_0600(tmp_path, open_umask) -> None:
    service = kafka.KafkaService(_settings(tmp_path))
    service.write_config()
    assert "s3cret" in service.config.read_text()
    assert _mode(service.config) == 0o600


def test_kafka_server_properties_is_not_written_through_a_link(tmp_path) -> None:
    service = kafka.KafkaService(_settings(tmp_path))
    service.home.mkdir(parents=True)
    service.config.symlink_to(tmp_path / "planted")
    with pytest.raises(StackError):
        service.write_config()
    assert not (tmp_path / "planted").exists()


def test_postgres_superuser_password_is_0600(tmp_path, open_umask) -> None:
    service = postgres.PostgresService(_settings(tmp_path))
    # As root the home may be in /var/tmp (pytest's folder is closed to postgres): keep it here.
    service.superuser_password_file = tmp_path / "superuser.password"
    service.write_superuser_password()
    assert _mode(service.superuser_password_file) == 0o600
    # As root the server runs as the postgres user, which must read it (initdb --pwfile).
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert os.lstat(service.superuser_password_file).st_uid == expected
    assert len(service.superuser_password_file.read_text().strip()) >= 20


def test_airflow_admin_password_file_is_0600(tmp_path, open_umask) -> None:
    settings = _settings(tmp_path)
    password = airflow_local.admin_password(settings)
    path = airflow_local.passwords_file(settings)
    assert json.loads(path.read_text()) == {airflow_local.ADMIN_USER: password}
    assert _mode(path) == 0o600


def test_airflow_admin_password_is_not_written_through_a_link(tmp_path) -> None:
    settings = _settings(tmp_path)
    path = airflow_local.passwords_file(settings)
    path.parent.mkdir(parents=True)
    path.symlink_to(tmp_path / "planted")
    with pytest.raises(StackError):
        airflow_local.admin_password(settings)
    assert not (tmp_path / "planted").exists()
