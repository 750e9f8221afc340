"""The floor a Python gateway can reach: a bare Responses-to-Chat relay with no translation logic.

    python bench/bare_relay.py --port 18003 --upstream http://127.0.0.1:18001/v1

Raw ASGI under uvicorn (uvloop + httptools), as codexgate is served. `POST /v1/responses`: the
body is decoded with orjson, mapped to a Chat Completions body in one naive pass (instructions
to a system message, messages to messages, calls and outputs to tool calls and tool messages,
function tools to tools; no validation, no dialects, no repair) and sent upstream with aiohttp
(one pooled session, TCP_NODELAY). Each upstream SSE `data:` line is decoded with orjson and
re-encoded as one Responses-style event with orjson; `[DONE]` becomes a `response.completed`
event carrying the text. Nothing else: no loop guard, no usage estimate, no error mapping
beyond a `response.failed` when the upstream breaks.

The benchmark (bench/run.py) measures codexgate as a ratio to this process in the same run,
so the figures do not depend on how busy the machine was.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

import aiohttp
import orjson
import uvicorn

JSON = dict[str, Any]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def _nodelay_socket(addr_info: tuple) -> socket.socket:  # type: ignore[type-arg]
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or ())


def chat_body(req: JSON) -> JSON:
    """The naive mapping; just enough that the upstream gets the same kind of body."""
    messages: list[JSON] = []
    if req.get("instructions"):
        messages.append({"role": "system", "content": req["instructions"]})
    for item in req.get("input") or ():
        kind = item.get("type")
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call"):
            args = (
                item.get("arguments")
                if kind == "function_call"
                else orjson.dumps({"input": item.get("input", "")}).decode()
            )
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": args},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))}
            )
    tools = []
    for tool in req.get("tools") or ():
        if tool.get("type") == "function":
            fn = {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool["parameters"],
            }
        else:
            fn = {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
            }
        tools.append({"type": "function", "function": fn})
    body: JSON = {
        "model": req.get("model"),
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = tools
    return body


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _event(kind: bytes, data: JSON) -> bytes:
    return b"event: " + kind + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class BareRelay:
    def __init__(self, upstream: str) -> None:
        self.url = upstream.rstrip("/") + "/chat/completions"
        self.session: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            connector = aiohttp.TCPConnector(limit=2000, socket_factory=_nodelay_socket)
            self.session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                skip_auto_headers=("User-Agent",),
            )
        return self.session

    async def __call__(self, scope: JSON, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if self.session is not None:
                        await self.session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        # Only the encoded chat body outlives this line, and only until it is sent: a relay
        # holding each request's decoded dict for the whole stream is not a floor for memory.
        upstream = [orjson.dumps(chat_body(orjson.loads(await _read_body(receive))))]
        await self._relay(upstream, send)

    async def _relay(self, upstream: list[bytes], send: Any) -> None:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        seq = 0
        text: list[str] = []
        usage: Any = None
        created = {"type": "response.created", "sequence_number": seq, "response": {"status": "in_progress"}}
        await send(
            {"type": "http.response.body", "body": _event(b"response.created", created), "more_body": True}
        )
        try:
            async with self._session().post(self.url, data=upstream.pop(), headers=headers) as resp:
                buf = b""
                async for piece in resp.content.iter_any():
                    buf += piece
                    *lines, buf = buf.split(b"\n")
                    out = []
                    for line in lines:
                        if not line.startswith(b"data: "):
                            continue
                        data = line[6:]
                        if data == b"[DONE]":
                            continue
                        chunk = orjson.loads(data)
                        seq += 1
                        choices = chunk.get("choices")
                        delta = choices[0].get("delta") or {} if choices else {}
                        if chunk.get("usage"):
                            usage = chunk["usage"]
                        if delta.get("content"):
                            text.append(delta["content"])
                            ev = {
                                "type": "response.output_text.delta",
                                "sequence_number": seq,
                                "delta": delta["content"],
                            }
                            out.append(_event(b"response.output_text.delta", ev))
                        elif delta.get("tool_calls"):
                            args = delta["tool_calls"][0].get("function", {}).get("arguments", "")
                            ev = {
                                "type": "response.function_call_arguments.delta",
                                "sequence_number": seq,
                                "delta": args,
                            }
                            out.append(_event(b"response.function_call_arguments.delta", ev))
                        else:
                            ev = {
                                "type": "response.in_progress",
                                "sequence_number": seq,
                                "chunk": chunk.get("id"),
                            }
                            out.append(_event(b"response.in_progress", ev))
                    if out:
                        await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            failed = {"type": "response.failed", "sequence_number": seq + 1, "error": {"message": str(exc)}}
            await send({"type": "http.response.body", "body": _event(b"response.failed", failed)})
            return
        done = {
            "type": "response.completed",
            "sequence_number": seq + 1,
            "response": {
                "status": "completed",
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "".join(text)}]}],
                "usage": usage,
            },
        }
        await send({"type": "http.response.body", "body": _event(b"response.completed", done)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the Chat Completions base URL, ending in /v1")
    args = parser.parse_args()
    uvicorn.run(
        BareRelay(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        ws="none",
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
