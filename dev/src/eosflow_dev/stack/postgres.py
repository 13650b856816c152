"""PostgreSQL 15 as the warehouse: a private cluster from the machine's initdb/pg_ctl.

initdb and pg_ctl refuse to run as root, so as root every server command runs as the `postgres`
system user on a data directory that user owns. Authentication is real (scram over TCP): the
superuser's password is generated and kept in the state folder; the pipeline has its own role
that owns the warehouse database and is not a superuser.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shutil
import stat
import subprocess
from pathlib import Path
from urllib.parse import quote

from eosflow.errors import StackError
from eosflow_dev.runtime import prereqs
from eosflow_dev.stack import process, secret_files, start_lock
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 60
SUPERUSER = "postgres"


def _as_root() -> bool:
    return os.geteuid() == 0


def _server_owner() -> tuple[int, int]:
    """Who runs the server and owns its files: the postgres user as root, else whoever runs eosflow."""
    if not _as_root():
        return os.geteuid(), os.getegid()
    found = pwd.getpwnam(SUPERUSER)
    return found.pw_uid, found.pw_gid


def ensure_home(home: Path, owner: tuple[int, int]) -> None:
    """The cluster's home, made here (0700, for `owner`), or one already there that is `owner`'s own.

    As root the home may be in /var/tmp, where anyone can make a folder or a link first: one that is
    a link, or not `owner`'s, or writable by others, is refused, never followed or used.
    """
    home.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(home, 0o700)
    except FileExistsError:
        _check_home(home, owner[0])
        return
    os.chown(home, *owner, follow_symlinks=False)


def _check_home(home: Path, uid: int) -> None:
    found = os.lstat(home)
    what = None
    if stat.S_ISLNK(found.st_mode):
        what = "is a symbolic link"
    elif not stat.S_ISDIR(found.st_mode):
        what = "is not a directory"
    elif found.st_uid != uid:
        what = f"is owned by uid {found.st_uid}, not the server's user (uid {uid})"
    elif found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        what = f"is a folder others can write (mode {stat.S_IMODE(found.st_mode):o})"
    if what:
        raise StackError(
            f"the warehouse cluster's home {home} {what}: eosflow did not make it, and will not use it. "
            f"Check who made it, remove {home}, and run `eosflow stack up` again"
        )


class PostgresService:
    name = "postgres"

    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.home = self._home()
        self.data_dir = self.home / "data"
        self.log_path = self.home / "postgres.log"
        self.superuser_password_file = self.home / "superuser.password"

    def _home(self) -> Path:
        home = self.s.state_dir / "postgres"
        if not _as_root() or self._postgres_user_can_reach(home.parent):
            return home
        # The project folder is closed to the postgres user (a private temp clone, say): keep the
        # cluster in a folder it can reach, one per project checkout, and say where in `status`.
        digest = hashlib.sha256(str(self.s.state_dir).encode()).hexdigest()[:12]
        return Path("/var/tmp") / f"eosflow-postgres-{digest}"

    @staticmethod
    def _postgres_user_can_reach(folder: Path) -> bool:
        probe = folder
        while not probe.exists():
            probe = probe.parent
        done = subprocess.run(
            ["runuser", "-u", SUPERUSER, "--", "test", "-x", str(probe)], capture_output=True
        )
        return done.returncode == 0

    # -- what `status` shows ----------------------------------------------------------------
    def ports(self) -> dict[str, int]:
        return {"EOSFLOW_PG_PORT": self.s.pg_port}

    def endpoint(self) -> str:
        secret = ":" + quote(self.s.pg_password, safe="") + "@"
        return f"{self.s.warehouse_uri.replace(secret, ':***@')} (data {self.data_dir})"

    def pid(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if process.pid_alive(pid) else None

    def healthy(self) -> bool:
        """`select 1` as the pipeline's role on the warehouse database."""
        import psycopg

        try:
            with psycopg.connect(self.s.warehouse_dsn, connect_timeout=3) as conn:
                return conn.execute("select 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    # -- lifecycle ------------------------------------------------------------------------------
    def prepare(self, log=print) -> None:
        prereqs.postgres_bin_dir()

    def start(self, log=print) -> None:
        ensure_home(self.home, _server_owner())
        # One start at a time: every pytest-xdist worker calls stack.up, and provisioning (ALTER ROLE ...
        # PASSWORD) from several at once fails with `tuple concurrently updated`.
        with start_lock.held(self.home / "start.lock"):
            self._start(log)

    def _start(self, log=print) -> None:
        if self.pid() is None:
            process.require_free_ports("postgres", self.s.pg_host, self.ports())
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb(log)
            self._write_settings()
            log(f"starting postgres on {self.s.pg_host}:{self.s.pg_port} (log: {self.log_path})")
            done = self._run_pg(
                "pg_ctl",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "start",
            )
            if done.returncode != 0:
                raise StackError(
                    f"postgres did not start (pg_ctl exit {done.returncode}). "
                    f"Last lines of {self.log_path}:\n{process.tail(self.log_path)}"
                )
        self._provision()
        if not self.healthy():
            raise StackError(
                f"postgres is running but `select 1` as {self.s.pg_user} on {self.s.pg_database} fails. "
                f"See {self.log_path}, or `eosflow stack reset` to start from an empty warehouse."
            )

    def stop(self, log=print) -> None:
        if self.pid() is None:
            return
        log(f"stopping postgres (data {self.data_dir})")
        self._run_pg("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def reset(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)

    # -- internals ----------------------------------------------------------------------------------
    def _run_pg(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(prereqs.postgres_bin_dir() / tool), *args]
        if _as_root():
            cmd = ["runuser", "-u", SUPERUSER, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, cwd="/")

    def _initdb(self, log) -> None:
        log(f"creating the warehouse cluster in {self.data_dir}")
        self.write_superuser_password()
        done = self._run_pg(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            f"--pwfile={self.superuser_password_file}",
            "-A",
            "scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
        )
        if done.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise StackError(f"initdb failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")

    def write_superuser_password(self) -> None:
        """A new superuser password, for initdb's --pwfile: readable by the server's user alone."""
        secret = secrets.token_urlsafe(18) + "\n"
        secret_files.write_secret(self.superuser_password_file, secret, _server_owner())

    def _write_settings(self) -> None:
        # A conf.d-style include keeps our settings apart from initdb's file and rewritten on every up.
        overrides = self.data_dir / "eosflow.conf"
        overrides.write_text(
            "# Written by `eosflow stack up` from EOSFLOW_PG_* settings.\n"
            f"listen_addresses = '{self.s.pg_host}'\n"
            f"port = {self.s.pg_port}\n"
            # No unix socket: socket paths are limited to ~100 characters and deep checkouts exceed it.
            "unix_socket_directories = ''\n"
            "shared_buffers = 256MB\n"
            "max_connections = 100\n"
            # A million-row commit writes about a gigabyte of WAL: at the default max_wal_size (1GB)
            # Postgres checkpointed in the middle of every large commit (its log said so, 18 times).
            "max_wal_size = 4GB\n"
            # Logical decoding, for Debezium (`eosflow stack up --with connect`): a slot and a WAL sender
            # per connector. Read at server start only: a running cluster needs a restart to take it.
            "wal_level = logical\n"
            "max_replication_slots = 10\n"
            "max_wal_senders = 10\n"
        )
        main_conf = self.data_dir / "postgresql.conf"
        text = main_conf.read_text()
        if "include_if_exists = 'eosflow.conf'" not in text:
            main_conf.write_text(text + "\ninclude_if_exists = 'eosflow.conf'\n")
        if _as_root():
            shutil.chown(overrides, SUPERUSER, SUPERUSER)

    def _provision(self) -> None:
        """The pipeline's role and the warehouse database; idempotent."""
        import psycopg
        from psycopg import sql

        password = self.superuser_password_file.read_text().strip()
        admin_dsn = (
            f"host={self.s.pg_host} port={self.s.pg_port} dbname=postgres "
            f"user={SUPERUSER} password={password}"
        )
        with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
            role = sql.Identifier(self.s.pg_user)
            exists = conn.execute("select 1 from pg_roles where rolname = %s", (self.s.pg_user,)).fetchone()
            verb = sql.SQL("alter") if exists else sql.SQL("create")
            conn.execute(
                sql.SQL("{} role {} login nosuperuser password {}").format(
                    verb, role, sql.Literal(self.s.pg_password)
                )
            )
            # The read-only role of the Airflow view and the metrics: it reads, never writes.
            reader = sql.Identifier(self.s.pg_reader_user)
            exists = conn.execute(
                "select 1 from pg_roles where rolname = %s", (self.s.pg_reader_user,)
            ).fetchone()
            conn.execute(
                sql.SQL("{} role {} login nosuperuser nocreatedb nocreaterole password {}").format(
                    sql.SQL("alter") if exists else sql.SQL("create"),
                    reader,
                    sql.Literal(self.s.pg_reader_password),
                )
            )
            # The reader names the open transactions that hold a publisher back through
            # eosflow.open_transactions, which runs as eosflow's role: pg_stat_activity shows other roles'
            # sessions' state and age only to members of pg_read_all_stats, so the owner is one, and the
            # reader, which would see every session's query text, is not (a stack made before: revoked).
            conn.execute(sql.SQL("grant pg_read_all_stats to {}").format(role))
            conn.execute(sql.SQL("revoke pg_read_all_stats from {}").format(reader))
            if not conn.execute(
                "select 1 from pg_database where datname = %s", (self.s.pg_database,)
            ).fetchone():
                conn.execute(
                    sql.SQL("create database {} owner {}").format(sql.Identifier(self.s.pg_database), role)
                )
