"""The ASGI app: faces, delivery, errors to HTTP, who may use it, limits, serving."""
