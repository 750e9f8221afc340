"""`codexgate usage`: each key's usage, read from the store's ledger (command.py)."""
