"""Toxiproxy (Shopify), a real fault-injecting TCP proxy, built from source and driven over HTTP.

The server is built once with the machine's Go into `<project>/.cache/bin/toxiproxy-server`, pinned to
TOXIPROXY_VERSION (or, with a Go older than 1.23, to OLD_GO_TOXIPROXY_VERSION), and reused while its
`--version` says a pinned version. The modules and the compiled packages stay in Go's own caches (`go env
GOMODCACHE GOCACHE`: ~/go/pkg/mod and ~/.cache/go-build unless set), the machine's as Maven's ~/.m2 holds the
jars, so a fresh clone on a machine that built it once links it in seconds.
Its HTTP API (README, "HTTP API") is spoken with urllib: no client library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from eosflow.errors import StackError
from eosflow_dev.stack import process

TOXIPROXY_VERSION = "v2.12.0"  # needs Go 1.23; newer 2.x tags are not listed by `go list -m -versions`
# Debian 12's golang-go is Go 1.19 (what `make` installs when a machine has no Go): the newest toxiproxy
# that builds with it is v2.5.0 (v2.9.0 does not); its HTTP API has every toxic the lab uses.
OLD_GO_TOXIPROXY_VERSION = "v2.5.0"
MODULE = "github.com/Shopify/toxiproxy/v2"
BUILD_TIMEOUT_S = 600.0  # a cold build downloads modules and compiles: ~45 s here on two cores
START_TIMEOUT_S = 20.0

GO_MISSING = (
    "Go not found: toxiproxy's server is built from source and needs Go (1.19 or newer). "
    "Install Go from https://go.dev/dl/ (e.g. into /usr/local/go) or with `apt-get install golang-go`, "
    "or point EOSFLOW_GO at the go binary."
)


class ToxiproxyError(StackError):
    """Building, starting or talking to toxiproxy failed; the message says what to do."""


def _go() -> str:
    for candidate in (os.environ.get("EOSFLOW_GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ToxiproxyError(GO_MISSING)


def _go_minor(go: str) -> int:
    """The minor version of Go 1.x (`go env GOVERSION`: go1.19.8 -> 19); 0 when it cannot say."""
    done = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=30)
    match = re.match(r"go1\.(\d+)", done.stdout.strip())
    return int(match.group(1)) if match else 0


def version_for(go_minor: int) -> str:
    """The pinned toxiproxy this Go can build."""
    return TOXIPROXY_VERSION if go_minor >= 23 else OLD_GO_TOXIPROXY_VERSION


def binary_path(root: Path) -> Path:
    return root / ".cache" / "bin" / "toxiproxy-server"


def _built_version(binary: Path) -> str | None:
    try:
        done = subprocess.run([str(binary), "-version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # "toxiproxy-server version 2.12.0"
    return done.stdout.split()[-1] if done.returncode == 0 and done.stdout.split() else None


def build(root: Path, log=print) -> Path:
    """The pinned toxiproxy server binary, built on first use; idempotent."""
    binary = binary_path(root)
    built = _built_version(binary) if binary.exists() else None
    if built in (TOXIPROXY_VERSION.lstrip("v"), OLD_GO_TOXIPROXY_VERSION.lstrip("v")):
        return binary
    go = _go()
    version = version_for(_go_minor(go))
    want = version.lstrip("v")
    env = dict(
        os.environ,
        GOBIN=str(binary.parent),
        # Go's own module and build caches, not the clone's: in a fresh clone a cold build downloaded and
        # compiled for 35 s (53 CPU-s), with them warm it links in 2-4 s (1 CPU-s).
        # Modules written writable (`rm -rf` can remove them); a static binary that needs no libc match.
        GOFLAGS="-modcacherw",
        CGO_ENABLED="0",
    )
    binary.parent.mkdir(parents=True, exist_ok=True)
    log(f"building toxiproxy {version} into {binary} with {go} (a machine's first build takes ~1 min)")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [
                go,
                "install",
                # Stamp the version, so a rebuild is needed only when the pinned versions change.
                f"-ldflags=-X {MODULE}.Version={want}",
                f"{MODULE}/cmd/server@{version}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise ToxiproxyError(
            f"building toxiproxy took longer than {BUILD_TIMEOUT_S:.0f}s; check that the Go module proxy "
            f"(GOPROXY, default proxy.golang.org) is reachable and try again"
        ) from exc
    if done.returncode != 0:
        raise ToxiproxyError(
            f"`go install {MODULE}/cmd/server@{version}` failed (exit {done.returncode}). "
            f"Check that the Go module proxy is reachable:\n{done.stderr[-2000:]}"
        )
    (binary.parent / "server").replace(binary)  # go install names it after the package folder
    log(f"built toxiproxy in {time.monotonic() - started:.0f}s")
    return binary


class Toxiproxy:
    """One toxiproxy server of our own: a pid file in `home`, its API on host:api_port."""

    def __init__(self, binary: Path, home: Path, host: str = "127.0.0.1") -> None:
        self.binary = binary
        self.home = home
        self.host = host
        self.pid_file = home / "toxiproxy.pid"
        self.log_path = home / "toxiproxy.log"
        self.api_port: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def _marker(self, api_port: int | None) -> str:
        # Our binary on our port (any port, for a server an earlier run left), never another toxiproxy.
        prefix = f"{self.binary} -host {self.host} -port "
        return prefix if api_port is None else f"{prefix}{api_port}"

    def pid(self) -> int | None:
        """The pid of the server in our pid file, if it is still ours and alive."""
        return process.owned_pid(self.pid_file, self._marker(self.api_port))

    def start(self, api_port: int, log=print) -> None:
        """Start the server (or adopt ours if it already runs there) and wait for its API."""
        self.api_port = api_port
        if self.pid() is not None:
            self._wait_api(None)
            return
        process.require_free_ports("toxiproxy", self.host, {"EOSFLOW_TOXIPROXY_PORT": api_port})
        self.home.mkdir(parents=True, exist_ok=True)
        log(f"starting toxiproxy API on {self.host}:{api_port} (log: {self.log_path})")
        with self.log_path.open("ab") as out:
            proc = subprocess.Popen(
                [str(self.binary), "-host", self.host, "-port", str(api_port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(os.environ, LOG_LEVEL="warn"),  # not one line per proxied connection
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait_api(proc)

    def stop(self, log=print) -> None:
        pid = self.pid()
        if pid is None:
            return
        log(f"stopping toxiproxy (pid {pid})")
        process.stop_pid(pid, timeout=10)
        self.pid_file.unlink(missing_ok=True)

    def _wait_api(self, proc: subprocess.Popen | None) -> None:
        def answers() -> bool:
            try:
                self._request("GET", "/version")
            except (ToxiproxyError, OSError):
                return False
            return True

        def died() -> str | None:
            if proc is None or proc.poll() is None:
                return None
            return (
                f"toxiproxy exited during start-up. Last lines of {self.log_path}:\n"
                f"{process.tail(self.log_path)}"
            )

        if not process.wait_until(answers, START_TIMEOUT_S, interval=0.2, abort=died):
            raise ToxiproxyError(
                f"toxiproxy's API did not answer on {self.host}:{self.api_port} within "
                f"{START_TIMEOUT_S:.0f}s. See {self.log_path}:\n{process.tail(self.log_path)}"
            )

    # -- the HTTP API ---------------------------------------------------------------------------
    def create_proxy(self, name: str, listen: str, upstream: str) -> dict[str, Any]:
        """A proxy from `listen` (host:port) to `upstream`; an old one of that name is replaced."""
        if name in self._request("GET", "/proxies"):
            self.delete_proxy(name)  # a rerun after a crash: start from a clean proxy, no old toxics
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        return self._request("POST", "/proxies", body)

    def delete_proxy(self, name: str) -> None:
        self._request("DELETE", f"/proxies/{name}")

    def add_toxic(
        self,
        proxy: str,
        name: str,
        type: str,
        stream: str,
        attributes: dict[str, Any],
        toxicity: float = 1.0,
    ) -> dict[str, Any]:
        """A toxic on one direction: `downstream` is broker -> client, `upstream` client -> broker."""
        if stream not in ("upstream", "downstream"):
            raise ValueError(f"stream must be upstream or downstream, not {stream!r}")
        body = {"name": name, "type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        return self._request("POST", f"/proxies/{proxy}/toxics", body)

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._request("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return self._request("GET", f"/proxies/{proxy}/toxics")

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self.api_port is None:
            raise ToxiproxyError("toxiproxy is not started: call start(api_port) first")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://{self.host}:{self.api_port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
                is_json = resp.headers.get_content_type() == "application/json"
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            raise ToxiproxyError(f"toxiproxy {method} {path} answered {exc.code}: {detail}") from exc
        except urllib.error.URLError as exc:
            raise ToxiproxyError(
                f"toxiproxy's API on {self.host}:{self.api_port} is unreachable ({exc.reason}); "
                "is it started?"
            ) from exc
        if not raw.strip():
            return None
        # GET /version is JSON since v2.6 and plain text ("2.5.0") before; every other answer is JSON.
        return json.loads(raw) if is_json else raw.decode(errors="replace").strip()
