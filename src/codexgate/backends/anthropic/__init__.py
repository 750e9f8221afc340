"""The anthropic kind (`kind = "anthropic"`): an Anthropic Messages server (backend.py) and its factory."""
