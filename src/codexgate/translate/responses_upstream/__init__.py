"""To and from a Responses upstream: the request out, the events back."""
