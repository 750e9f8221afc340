"""`codexgate codex-setup`: the Codex profile and model catalog (catalog.py) and the command
(command.py)."""
