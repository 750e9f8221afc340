"""The responses kind (`kind = "responses"`): a Responses server (backend.py) and its factory."""
