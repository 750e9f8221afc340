"""The embedded model (`kind = "embedded"`): a small model the gateway runs itself, so that it
answers with nothing else installed. runtime.py fetches llama.cpp's prebuilt server and the
model once per user, child.py is the server's process, supervisor.py runs and restarts it,
backend.py reaches it as an ordinary Chat Completions upstream; factory.py builds it from the
settings, fallback.py makes it `serve`'s default when nothing else is found.

Nothing is imported here: child.py runs as `python -m` and must start without the gateway."""
