"""A scripted model server on loopback that speaks each agent client's API.

One HTTP server answers the three wire formats the clients use:

- Anthropic Messages (``POST /v1/messages``, SSE when ``stream`` is true) for
  Claude Code, through ``ANTHROPIC_BASE_URL``;
- OpenAI Responses (``POST /v1/responses``, SSE) for Codex, through a custom
  model provider in its config;
- Gemini ``generateContent`` / ``streamGenerateContent`` for Gemini CLI,
  through ``GOOGLE_GEMINI_BASE_URL``.

The script is a list of abstract steps (``Shell``, ``Mcp``, ``WriteFile``). The
server is stateless about progress: the step it answers with is the number of
tool results already in the conversation, so side requests a client makes
(titles, quota checks, next-speaker checks) and retries never skip a step.
When the script is done it answers with plain text. Every request body is kept,
so a test can read what the model was shown after each step.

Test support only: it binds 127.0.0.1 and never reaches any other address.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FINAL_TEXT = "SCRIPT-DONE"


@dataclass(frozen=True)
class Shell:
    command: str


@dataclass(frozen=True)
class Mcp:
    tool: str  # our tool's bare name, e.g. "sandbox_status"
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteFile:
    path: str
    content: str


Step = Shell | Mcp | WriteFile


@dataclass
class Seen:
    api: str
    path: str
    body: dict[str, Any]
    step: int  # tool results in the conversation when it arrived
    tools: list[str]


# ---------------------------------------------------------------------------
# Reading each API's conversation.


def _anthropic_results(body: dict[str, Any]) -> list[str]:
    out = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append(json.dumps(block.get("content"), ensure_ascii=False))
    return out


def _openai_results(body: dict[str, Any]) -> list[str]:
    out = []
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_call_output"):
            out.append(json.dumps(item.get("output"), ensure_ascii=False))
    return out


def _gemini_results(body: dict[str, Any]) -> list[str]:
    out = []
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            if isinstance(part, dict) and "functionResponse" in part:
                out.append(json.dumps(part["functionResponse"], ensure_ascii=False))
    return out


def _anthropic_tools(body: dict[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]


def _openai_tools(body: dict[str, Any]) -> list[str]:
    out = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if t.get("name"):
            out.append(str(t["name"]))
        for sub in t.get("tools") or []:  # namespaced tools
            if isinstance(sub, dict) and sub.get("name"):
                out.append(f"{t.get('name') or t.get('namespace')}.{sub['name']}")
    return out


def _gemini_tools(body: dict[str, Any]) -> list[str]:
    out = []
    for t in body.get("tools") or []:
        for decl in (t or {}).get("functionDeclarations") or []:
            out.append(str(decl.get("name")))
    return out


def _find_tool(tools: list[str], bare: str) -> str:
    for name in tools:
        if name == bare or re.search(rf"(^|[_.\-]){re.escape(bare)}$", name):
            return name
    raise LookupError(f"no tool named like {bare!r} among {tools}")


# ---------------------------------------------------------------------------
# Writing each API's answer.


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data) + "\n\n").encode()


class ModelServer:
    """``with ModelServer(steps) as srv: srv.url`` serves until the block ends."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if "/models" in self.path:
                    self._json(200, {"data": [], "models": []})
                else:
                    self._json(404, {"error": "not found"})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.headers.get("Content-Encoding") == "zstd" or raw[:4] == b"\x28\xb5\x2f\xfd":
                    server.errors.append("zstd body")
                    self._json(400, {"error": "compressed body"})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": "bad json"})
                    return
                try:
                    server.dispatch(self, body)
                except Exception as exc:  # surfaced by the test through .errors
                    server.errors.append(f"{self.path}: {type(exc).__name__}: {exc}")
                    try:
                        self._json(500, {"error": str(exc)})
                    except OSError:
                        pass

            def _json(self, code: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, chunks: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                data = b"".join(chunks)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what tests read ---------------------------------------------------

    def results(self) -> list[str]:
        """The tool results of the longest conversation seen (in order)."""
        best: list[str] = []
        for s in self.seen:
            res = {"anthropic": _anthropic_results, "openai": _openai_results,
                   "gemini": _gemini_results}[s.api](s.body)
            if len(res) > len(best):
                best = res
        return best

    def tool_names(self) -> list[str]:
        names: list[str] = []
        for s in self.seen:
            if len(s.tools) > len(names):
                names = s.tools
        return names

    # -- answering ---------------------------------------------------------

    def _step(self, api: str, path: str, body: dict[str, Any], results: list[str],
              tools: list[str]) -> Step | None:
        with self.lock:
            self.seen.append(Seen(api, path, body, len(results), tools))
        if not tools or len(results) >= len(self.steps):
            return None
        step = self.steps[len(results)]
        if isinstance(step, Mcp):
            try:
                _find_tool(tools, step.tool)
            except LookupError as exc:  # end the run now; the test reports it
                self.errors.append(str(exc))
                return None
        return step

    def dispatch(self, h: Any, body: dict[str, Any]) -> None:
        path = h.path.split("?")[0]
        if path.endswith("/messages/count_tokens"):
            h._json(200, {"input_tokens": 10})
        elif path.endswith("/messages"):
            self._anthropic(h, body)
        elif path.endswith("/responses"):
            self._openai(h, body)
        elif ":streamGenerateContent" in path or ":generateContent" in path:
            self._gemini(h, body, stream=":streamGenerateContent" in path)
        elif ":countTokens" in path:
            h._json(200, {"totalTokens": 10})
        elif ":embedContent" in path or ":batchEmbedContents" in path:
            h._json(200, {"embeddings": [{"values": [0.0] * 8}]})
        else:
            h._json(404, {"error": f"unknown path {path}"})

    # Anthropic Messages

    def _anthropic(self, h: Any, body: dict[str, Any]) -> None:
        tools = _anthropic_tools(body)
        n = len(_anthropic_results(body))
        step = self._step("anthropic", h.path, body, _anthropic_results(body), tools)
        if step is None:
            block: dict[str, Any] = {"type": "text", "text": FINAL_TEXT}
            stop = "end_turn"
        else:
            name, args = self._anthropic_call(step, tools)
            block = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": name, "input": args}
            stop = "tool_use"
        usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                   "model": body.get("model") or "claude", "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            h._json(200, {**message, "content": [block], "stop_reason": stop})
            return
        chunks = [_sse("message_start", {"type": "message_start", "message": message})]
        if block["type"] == "text":
            chunks.append(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                       "content_block": {"type": "text",
                                                                         "text": ""}}))
            chunks.append(_sse("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            chunks.append(_sse("content_block_start", {
                "type": "content_block_start", "index": 0,
                "content_block": {**block, "input": {}}}))
            chunks.append(_sse("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        chunks.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        chunks.append(_sse("message_delta", {"type": "message_delta",
                                             "delta": {"stop_reason": stop, "stop_sequence": None},
                                             "usage": {"output_tokens": 5}}))
        chunks.append(_sse("message_stop", {"type": "message_stop"}))
        h._stream(chunks)

    @staticmethod
    def _anthropic_call(step: Step, tools: list[str]) -> tuple[str, dict[str, Any]]:
        if isinstance(step, Shell):
            return "Bash", {"command": step.command, "description": "scripted step"}
        if isinstance(step, WriteFile):
            return "Write", {"file_path": step.path, "content": step.content}
        return _find_tool(tools, step.tool), dict(step.args)

    # OpenAI Responses

    def _openai(self, h: Any, body: dict[str, Any]) -> None:
        tools = _openai_tools(body)
        results = _openai_results(body)
        n = len(results)
        step = self._step("openai", h.path, body, results, tools)
        rid = f"resp_{len(self.seen):04d}"
        if step is None:
            item: dict[str, Any] = {"type": "message", "role": "assistant", "id": f"msg_{n:04d}",
                                    "status": "completed",
                                    "content": [{"type": "output_text", "text": FINAL_TEXT,
                                                 "annotations": []}]}
        else:
            name, args = self._openai_call(step, tools)
            namespace = None
            if "." in name:
                namespace, name = name.split(".", 1)
            item = {"type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}",
                    "name": name, "arguments": json.dumps(args), "status": "completed"}
            if namespace:
                item["namespace"] = namespace
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        chunks = [
            _sse("response.created", {"type": "response.created",
                                      "response": {"id": rid, "status": "in_progress"}}),
            _sse("response.output_item.done", {"type": "response.output_item.done",
                                               "output_index": 0, "item": item}),
            _sse("response.completed", {"type": "response.completed",
                                        "response": {"id": rid, "status": "completed",
                                                     "usage": usage, "output": [item]}}),
        ]
        h._stream(chunks)

    @staticmethod
    def _openai_call(step: Step, tools: list[str]) -> tuple[str, dict[str, Any]]:
        if isinstance(step, WriteFile):
            step = Shell(f"cat > {step.path} <<'EOF'\n{step.content}\nEOF")
        if isinstance(step, Shell):
            if "exec_command" in tools:
                return "exec_command", {"cmd": step.command}
            if "shell_command" in tools:
                return "shell_command", {"command": step.command}
            if "shell" in tools:
                return "shell", {"command": ["bash", "-lc", step.command]}
            raise LookupError(f"no shell tool among {tools}")
        return _find_tool(tools, step.tool), dict(step.args)

    # Gemini

    def _gemini(self, h: Any, body: dict[str, Any], *, stream: bool) -> None:
        tools = _gemini_tools(body)
        results = _gemini_results(body)
        cfg = body.get("generationConfig") or {}
        step = self._step("gemini", h.path, body, results, tools)
        if step is None:
            if cfg.get("responseMimeType") == "application/json" or cfg.get("responseSchema") \
                    or cfg.get("responseJsonSchema"):
                text = json.dumps({"next_speaker": "user", "reasoning": "scripted",
                                   "complexity_reasoning": "scripted",
                                   "complexity_score": 1, "model_choice": "flash"})
            else:
                text = FINAL_TEXT
            part: dict[str, Any] = {"text": text}
        else:
            name, args = self._gemini_call(step, tools)
            part = {"functionCall": {"name": name, "args": args}}
        doc = {"candidates": [{"content": {"role": "model", "parts": [part]},
                               "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                 "totalTokenCount": 15},
               "modelVersion": "gemini-scripted"}
        if stream:
            h._stream([b"data: " + json.dumps(doc).encode() + b"\r\n\r\n"])
        else:
            h._json(200, doc)

    @staticmethod
    def _gemini_call(step: Step, tools: list[str]) -> tuple[str, dict[str, Any]]:
        if isinstance(step, Shell):
            return "run_shell_command", {"command": step.command,
                                         "description": "scripted step"}
        if isinstance(step, WriteFile):
            return "write_file", {"file_path": step.path, "content": step.content}
        return _find_tool(tools, step.tool), dict(step.args)
