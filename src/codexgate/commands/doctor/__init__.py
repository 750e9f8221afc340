"""`codexgate doctor`: probe a model server (probe.py), then show and write what it found
(command.py)."""
