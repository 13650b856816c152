"""Small process helpers: free ports, pid files that name their owner, waiting with a deadline."""

from __future__ import annotations

import errno
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from eosflow.errors import StackError


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def require_free_ports(service: str, host: str, ports: dict[str, int]) -> None:
    busy = [f"{name} port {port}" for name, port in ports.items() if not port_is_free(host, port)]
    if busy:
        env_hint = ", ".join(name for name in ports)
        raise StackError(
            f"{service}: {' and '.join(busy)} on {host} already in use by another process. "
            f"Stop that process, or choose free ports with {env_hint} and run `eosflow stack up` again."
        )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def owned_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in pid_file if that process is alive and its command line contains marker.

    The marker (our own config path) keeps us from signalling an unrelated process that
    happens to reuse the pid after a reboot.
    """
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if not pid_alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return pid if marker in cmdline else None


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM, wait, then SIGKILL the process group the service was started in."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    interval: float = 0.5,
    abort: Callable[[], str | None] | None = None,
) -> bool:
    """Poll check() until it is true or timeout passes; abort() returning a message stops early."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if abort is not None and (reason := abort()):
            raise StackError(reason)
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log yet)"
