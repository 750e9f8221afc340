"""To and from the Codex agent: the turn to start (what is new in a thread), its notifications back."""
