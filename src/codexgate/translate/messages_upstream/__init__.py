"""To an Anthropic Messages upstream and back: the request (request.py, messages.py), the cache
breakpoints (cache.py) and the stream (stream.py)."""
