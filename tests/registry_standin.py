"""The smallest stand-in for a schema registry's Confluent-compatible REST API, for unit tests.

It serves what eosflow's decoder asks (`GET /schemas/ids/<id>`, `GET /subjects/<s>/versions/<v>`)
and what a producer's serializer does (`POST /subjects/<s>/versions`), and can be told to fail
(`fail_with`) so that a registry outage can be told apart from a bad record. The integration tests
use the stack's real registry (Apicurio).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class StandinRegistry:
    def __init__(self) -> None:
        self.schemas: dict[int, dict] = {}  # id -> {"schema": text, "schemaType"?, "references"?}
        self.subjects: dict[str, list[int]] = {}
        self.fail_with: int | None = None  # an HTTP status every request gets, when set
        self.requests: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                registry.requests.append(self.path)
                if registry.fail_with is not None:
                    return self._answer(registry.fail_with, {"error_code": registry.fail_with})
                parts = [unquote(p) for p in self.path.strip("/").split("/")]
                if parts[:2] == ["schemas", "ids"] and int(parts[2]) in registry.schemas:
                    return self._answer(200, registry.schemas[int(parts[2])])
                if parts[0] == "subjects" and parts[2:3] == ["versions"]:
                    ids = registry.subjects.get(parts[1], [])
                    version = int(parts[3])
                    if 1 <= version <= len(ids):
                        sid = ids[version - 1]
                        return self._answer(200, {"id": sid, "version": version, **registry.schemas[sid]})
                return self._answer(404, {"error_code": 40403, "message": "Schema not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                subject = unquote(self.path.strip("/").split("/")[1])
                self._answer(200, {"id": registry.add(subject, body)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, subject: str, entry: dict) -> int:
        for sid, known in self.schemas.items():
            if known == entry:
                return sid
        sid = len(self.schemas) + 1
        self.schemas[sid] = entry
        self.subjects.setdefault(subject, []).append(sid)
        return sid

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
