"""The Postgres home (as root, in /var/tmp) is made fresh by eosflow, or is already the server user's own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from eosflow.errors import StackError
from eosflow_dev.stack.postgres import ensure_home

ME = (os.geteuid(), os.getegid())


def test_a_new_home_is_made_0700_for_its_owner(tmp_path) -> None:
    home = tmp_path / "eosflow-postgres-abc"
    ensure_home(home, ME)
    found = os.lstat(home)
    assert stat.S_ISDIR(found.st_mode) and stat.S_IMODE(found.st_mode) == 0o700
    assert (found.st_uid, found.st_gid) == ME


def test_the_servers_own_home_is_kept(tmp_path) -> None:
    home = tmp_path / "eosflow-postgres-abc"
    home.mkdir(mode=0o755)
    (home / "data").mkdir()
    ensure_home(home, ME)
    assert (home / "data").is_dir()


def test_a_planted_symlink_is_refused_and_its_target_untouched(tmp_path) -> None:
    target = tmp_path / "theirs"
    target.mkdir(mode=0o700)
    home = tmp_path / "eosflow-postgres-abc"
    home.symlink_to(target)
    with pytest.raises(StackError, match=f"symbolic link.*remove {home}"):
        ensure_home(home, ME)
    assert home.is_symlink() and list(target.iterdir()) == []
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_a_dangling_symlink_is_refused_and_creates_nothing(tmp_path) -> None:
    home = tmp_path / "eosflow-postgres-abc"
    home.symlink_to(tmp_path / "made-through-the-link")
    with pytest.raises(StackError, match="symbolic link"):
        ensure_home(home, ME)
    assert not (tmp_path / "made-through-the-link").exists()


def test_a_folder_someone_else_owns_is_refused(tmp_path) -> None:
    home = tmp_path / "eosflow-postgres-abc"
    home.mkdir(mode=0o700)
    expected = (os.geteuid() + 1, os.getegid())  # the server's user is not whoever made this folder
    with pytest.raises(StackError, match=f"owned by uid {os.geteuid()}.*remove {home}"):
        ensure_home(home, expected)


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o1777])
def test_a_folder_others_may_write_is_refused(tmp_path, mode) -> None:
    home = tmp_path / "eosflow-postgres-abc"
    home.mkdir()
    home.chmod(mode)
    with pytest.raises(StackError, match="others can write"):
        ensure_home(home, ME)


def test_a_file_in_its_place_is_refused(tmp_path) -> None:
    home = tmp_path / "eosflow-postgres-abc"
    home.write_text("")
    with pytest.raises(StackError, match="not a directory"):
        ensure_home(home, ME)


def test_the_home_is_checked_before_the_server_starts(tmp_path, monkeypatch) -> None:
    import dataclasses

    from eosflow_dev.stack import postgres
    from eosflow_dev.stack import settings as settings_mod

    service = postgres.PostgresService(dataclasses.replace(settings_mod.load(), state_dir=tmp_path / "s"))
    home = tmp_path / "planted"
    home.symlink_to(tmp_path)
    service.home = home
    monkeypatch.setattr(service, "pid", lambda: None)  # as if no server ran: nothing else is reached
    with pytest.raises(StackError, match="symbolic link"):
        service.start(log=lambda _: None)
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["planted"]
