"""A stand-in for the ECS container agent's task scale-in protection endpoint, on 127.0.0.1.

ECS cannot run here, so, like MiniStack for DynamoDB and SQS, this emulates the one part of the agent
the worker calls: ``$ECS_AGENT_URI/task-protection/v1/state`` as the AWS documentation describes it
("Amazon ECS task scale-in protection endpoint"). PUT takes ``{"ProtectionEnabled": bool,
"ExpiresInMinutes": 1..2880 (optional)}`` and answers ``{"protection": {"ExpirationDate",
"ProtectionEnabled", "TaskArn"}}``; a malformed request gets 400 with ``{"error": {"Code", "Message"}}``;
GET answers the current state. It records every call, and can be told to fail (500) like an agent
whose ECS call failed, or with AccessDenied when the task role lacks ``ecs:UpdateTaskProtection``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STATE_PATH = "/task-protection/v1/state"
TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/cluster/0123456789abcdef0123456789abcdef"


@dataclass
class Call:
    """One request: its method, the JSON it sent (None for GET), when, and the status answered."""

    method: str
    body: Any
    at: float
    status: int


@dataclass
class AgentState:
    protected: bool = False
    expires_at: datetime | None = None
    #: None: answer normally; else the HTTP status to fail every PUT with.
    fail_with: int | None = None
    calls: list[Call] = field(default_factory=list)


class EcsAgent:
    """``with EcsAgent() as agent``: ``agent.uri`` is what ECS puts in ``ECS_AGENT_URI``."""

    def __init__(self) -> None:
        self.state = AgentState()
        self._lock = threading.Lock()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if not self.path.endswith(STATE_PATH):
                    return self._send(404, {"error": {"Code": "NotFound", "Message": self.path}})
                with agent._lock:
                    agent.state.calls.append(Call("GET", None, time.monotonic(), 200))
                    return self._send(200, {"protection": agent._protection()})

            def do_PUT(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with agent._lock:
                    status, answer = agent._put(self.path, raw)
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = raw.decode(errors="replace")
                    agent.state.calls.append(Call("PUT", body, time.monotonic(), status))
                self._send(status, answer)

            def _send(self, status: int, answer: Any) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}/api/0123456789abcdef-1234"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> EcsAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _protection(self) -> dict[str, Any]:
        expires = self.state.expires_at
        if expires is not None and datetime.now(UTC) >= expires:
            self.state.protected, self.state.expires_at = False, None
        return {
            "ExpirationDate": expires.isoformat() if self.state.protected and expires else None,
            "ProtectionEnabled": self.state.protected,
            "TaskArn": TASK_ARN,
        }

    def _put(self, path: str, raw: bytes) -> tuple[int, Any]:
        if not path.endswith(STATE_PATH):
            return 404, {"error": {"Code": "NotFound", "Message": path}}
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"error": {"Code": "InvalidRequest", "Message": "body is not JSON"}}
        enabled = body.get("ProtectionEnabled") if isinstance(body, dict) else None
        minutes = body.get("ExpiresInMinutes", 120) if isinstance(body, dict) else None
        if not isinstance(enabled, bool):
            return 400, {"error": {"Code": "InvalidRequest", "Message": "ProtectionEnabled is required"}}
        if enabled and (not isinstance(minutes, int) or not 1 <= minutes <= 2880):
            return 400, {
                "error": {"Code": "InvalidParameterException", "Message": f"ExpiresInMinutes {minutes}"}
            }
        if self.state.fail_with == 403:
            return 403, {
                "error": {"Arn": TASK_ARN, "Code": "AccessDeniedException", "Message": "not authorized"}
            }
        if self.state.fail_with is not None:
            return self.state.fail_with, {
                "error": {"Arn": TASK_ARN, "Code": "ServerException", "Message": "boom"}
            }
        self.state.protected = enabled
        self.state.expires_at = datetime.now(UTC) + timedelta(minutes=minutes) if enabled else None
        return 200, {"protection": self._protection()}

    @property
    def protected(self) -> bool:
        with self._lock:
            return bool(self._protection()["ProtectionEnabled"])

    def puts(self) -> list[Call]:
        with self._lock:
            return [c for c in self.state.calls if c.method == "PUT"]

    def fail(self, status: int | None) -> None:
        with self._lock:
            self.state.fail_with = status
