"""To and from a Chat Completions upstream: the request out, the chunks back."""
