"""`eosflow airflow` says where the admin password is, never the password itself."""

from __future__ import annotations

import dataclasses

from eosflow_dev.stack import airflow_local
from eosflow_dev.stack import settings as settings_mod


def test_the_start_lines_name_the_file_not_the_password(tmp_path) -> None:
    settings = dataclasses.replace(settings_mod.load(), state_dir=tmp_path)
    lines: list[str] = []
    airflow_local.announce(settings, lines.append)
    password = airflow_local.admin_password(settings)
    said = "\n".join(lines)
    assert password not in said
    assert str(airflow_local.passwords_file(settings)) in said
    assert f"user {airflow_local.ADMIN_USER}" in said and f":{settings.airflow_port}" in said
