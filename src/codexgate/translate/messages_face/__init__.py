"""The Anthropic Messages face: a Messages request in, Messages stream events (or a JSON body) out."""
