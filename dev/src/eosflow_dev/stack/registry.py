"""A Confluent-compatible schema registry (Apicurio Registry 3.0.9) for Avro pipelines, from Maven Central.

Apicurio publishes its ready-built app as one archive (infra/maven/registry/pom.xml unpacks it); it
runs on the stack's Java 17 with its schemas in memory (H2), so a restart forgets them, as a restart
of the broker's data does not. Its Confluent-compatible API is under /apis/ccompat/v7
(StackSettings.stack_registry_url). Compatibility is set to BACKWARD after start, as Confluent's registry
defaults to (Apicurio's default is NONE).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request

from eosflow.errors import StackError
from eosflow_dev.runtime import jars, prereqs
from eosflow_dev.stack import process
from eosflow_dev.stack.settings import StackSettings

START_TIMEOUT_S = 60.0
VERSION = "3.0.9"  # the newest line built for Java 17 (3.3 needs Java 21)


class RegistryService:
    name = "registry"

    def __init__(self, settings: StackSettings) -> None:
        self.s = settings
        self.home = settings.state_dir / "registry"
        self.log_path = self.home / "registry.log"
        self.pid_file = self.home / "registry.pid"

    @property
    def runner(self):
        return jars.folder(self.s, "registry") / f"apicurio-registry-app-{VERSION}-runner.jar"

    def ports(self) -> dict[str, int]:
        return {"EOSFLOW_REGISTRY_PORT": self.s.registry_port}

    def endpoint(self) -> str:
        return self.s.stack_registry_url

    def pid(self) -> int | None:
        return process.owned_pid(self.pid_file, str(self.runner))

    def healthy(self, timeout: float = 3.0) -> bool:
        try:
            url = f"http://{self.s.kafka_host}:{self.s.registry_port}/health/ready"
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def prepare(self, log=print) -> None:
        prereqs.java()
        jars.fetch(self.s, "registry", log=log)

    def start(self, log=print) -> None:
        if self.pid() is not None:
            if not self.healthy():
                self._wait_healthy(self.pid())
            return
        process.require_free_ports("registry", self.s.kafka_host, self.ports())
        self.home.mkdir(parents=True, exist_ok=True)
        log(f"starting the schema registry on {self.s.stack_registry_url} (log: {self.log_path})")
        with self.log_path.open("ab") as out:
            proc = subprocess.Popen(
                [
                    prereqs.java(),
                    "-Xmx384m",
                    f"-Dquarkus.http.host={self.s.kafka_host}",
                    f"-Dquarkus.http.port={self.s.registry_port}",  # its own default is 8080, Airflow's
                    "-Dapicurio.storage.kind=sql",
                    "-Dapicurio.storage.sql.kind=h2",
                    "-Dapicurio.datasource.url=jdbc:h2:mem:registry",
                    "-Dquarkus.oidc.tenant-enabled=false",
                    "-jar",
                    str(self.runner),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait_healthy(proc.pid, proc)
        self._set_compatibility("BACKWARD")

    def stop(self, log=print) -> None:
        pid = self.pid()
        if pid is None:
            return
        log(f"stopping the schema registry (pid {pid})")
        process.stop_pid(pid)
        self.pid_file.unlink(missing_ok=True)

    def reset(self) -> None:
        self.log_path.unlink(missing_ok=True)  # its schemas live in memory: a restart forgets them

    def _wait_healthy(self, pid: int, proc: subprocess.Popen | None = None) -> None:
        def died() -> str | None:
            alive = proc.poll() is None if proc is not None else process.pid_alive(pid)
            return (
                None
                if alive
                else f"the schema registry exited during start-up:\n{process.tail(self.log_path)}"
            )

        if not process.wait_until(self.healthy, START_TIMEOUT_S, interval=0.5, abort=died):
            raise StackError(
                f"the schema registry did not answer {START_TIMEOUT_S:.0f}s after start. "
                f"See {self.log_path}:\n{process.tail(self.log_path)}"
            )

    def _set_compatibility(self, level: str) -> None:
        request = urllib.request.Request(
            f"{self.s.stack_registry_url}/config",
            data=json.dumps({"compatibility": level}).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
            method="PUT",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
