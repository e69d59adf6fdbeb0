"""A real HTTP server on 127.0.0.1 speaking the chat-completions protocol, replaying a script.

Each script entry answers one POST /v1/chat/completions:
- a dict: the assistant message to return (see `say` and `call`);
- `Fail(status)`: an HTTP error response;
- a callable(request_body) -> one of the above, for replies that depend on the conversation.
Requests are checked the way strict servers check them (every tool call answered before the next
assistant turn, arguments valid JSON, tools present) and a malformed one gets a 400, so a test
passes only if the agent sends what real endpoints accept. All request bodies are kept, and their
headers (names in lower case).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Fail:
    status: int = 500
    message: str = "scripted failure"


_ids = iter(range(1, 1_000_000))


def call(name: str, raw_arguments: str | None = None, *, call_id: str | None = None, **arguments) -> dict:
    """A tool call; pass raw_arguments to send them verbatim (e.g. malformed JSON), call_id for a fixed id."""
    args = raw_arguments if raw_arguments is not None else json.dumps(arguments)
    return {"id": call_id or f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": args}}


def say(content: str = "", *calls: dict, finish_reason: str | None = None) -> dict:
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    message["_finish_reason"] = finish_reason or ("tool_calls" if calls else "stop")
    return message


def check_request(body: dict) -> str | None:
    """Why a strict server would reject this request, or None."""
    if not body.get("model"):
        return "model missing"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages missing"
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            return f"message {i}: bad role {role!r}"
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                return f"message {i}: tool result for unknown call {m.get('tool_call_id')!r}"
            pending.discard(m["tool_call_id"])
            if not isinstance(m.get("content"), str):
                return f"message {i}: tool content must be a string"
            continue
        if pending:
            return f"message {i}: tool calls {sorted(pending)} were not answered"
        for c in m.get("tool_calls") or []:
            try:
                json.loads(c["function"]["arguments"])
            except (KeyError, TypeError, json.JSONDecodeError):
                return f"message {i}: tool call arguments are not valid JSON"
            pending.add(c["id"])
    if pending:
        return "the last tool calls were not answered"
    return None


class ScriptedChatServer:
    def __init__(self, script: list, *, delay: float = 0.0):
        self.script = list(script)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.delay = delay
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, payload = server._answer(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def remaining(self) -> int:
        return len(self.script)

    def _answer(self, path: str, body: dict) -> tuple[int, dict]:
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            self.requests.append(body)
            if not path.endswith("/chat/completions"):
                return 404, {"error": {"message": f"no route {path}"}}
            problem = check_request(body)
            if problem:
                return 400, {"error": {"message": f"invalid request: {problem}", "type": "BadRequestError"}}
            if not self.script:
                return 500, {"error": {"message": "script exhausted"}}
            entry = self.script.pop(0)
        if callable(entry):
            entry = entry(body)
        if isinstance(entry, Fail):
            return entry.status, {"error": {"message": entry.message}}
        message = dict(entry)
        finish = message.pop("_finish_reason", "stop")
        prompt_chars = sum(len(m.get("content") or "") for m in body["messages"])
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_chars // 4 + 10, "completion_tokens": 20,
                      "total_tokens": prompt_chars // 4 + 30},
        }
