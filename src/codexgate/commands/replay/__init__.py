"""`codexgate replay`: a recorded turn run again through the gateway (command.py) against its
recorded upstream (upstream.py)."""
