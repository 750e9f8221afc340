"""The chat kind (`kind = "chat"`): a Chat Completions server (backend.py) and its factory."""
