"""`codexgate claude-setup`: the `env` block of Claude Code's settings.json that points it at the
gateway (settings.py), each route's context window (windows.py) and the command (command.py)."""
