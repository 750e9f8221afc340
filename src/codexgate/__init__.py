"""codexgate: a Responses API gateway for Codex CLI over Chat Completions models."""

__version__ = "0.1.0"
