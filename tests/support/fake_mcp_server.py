"""A tiny MCP server over stdio, for Codex to start from its config and call.

    [mcp_servers.notes]
    command = "/path/to/python"
    args = ["/path/to/tests/support/fake_mcp_server.py"]

It speaks newline-delimited JSON-RPC 2.0 (the MCP stdio transport): answers `initialize`,
`tools/list` (one tool, `lookup` {key: string}) and `tools/call` (`lookup` answers the text
"value of <key>"); `ping` gets {}; other requests get -32601; notifications are read and
ignored. Stdlib only, so it starts at once.
"""

from __future__ import annotations

import json
import sys
from typing import Any

JSON = dict[str, Any]
PROTOCOL_VERSION = "2025-06-18"
LOOKUP = {
    "name": "lookup",
    "description": "Look a key up in the notes.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def answer(method: str, params: JSON) -> JSON | None:
    """The result of a request, or None for a method this server does not have."""
    if method == "initialize":
        version = params.get("protocolVersion") or PROTOCOL_VERSION
        info = {"name": "fake-notes", "version": "0.0.1"}
        return {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
    if method == "tools/list":
        return {"tools": [LOOKUP]}
    if method == "tools/call":
        key = (params.get("arguments") or {}).get("key", "")
        return {"content": [{"type": "text", "text": f"value of {key}"}], "isError": False}
    if method == "ping":
        return {}
    return None


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # a notification, or an answer to a request this server never sends
        result = answer(message["method"], message.get("params") or {})
        reply: JSON = {"jsonrpc": "2.0", "id": message["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": f"no method {message['method']}"}
        else:
            reply["result"] = result
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
