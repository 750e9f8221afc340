"""The Codex agent as a backend (`kind = "codex"`): `codex app-server` driven over JSON-RPC, its
threads, the backend."""
