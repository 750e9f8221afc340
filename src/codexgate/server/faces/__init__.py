"""Faces: what one kind of client sends, turned into the canonical request, and the canonical
event stream turned into what that client reads."""
