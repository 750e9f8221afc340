"""The Chat Completions face: a chat request in, chat chunks (or a JSON body) out."""
