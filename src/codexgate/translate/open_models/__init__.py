"""Repairs for open models: think tags, tool calls written as text, loops, broken arguments, the
patch grammar, sampling defaults."""
