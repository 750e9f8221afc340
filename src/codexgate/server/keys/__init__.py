"""What each API key may spend and what it spent: admission by its limits (admission.py), the
rate-limit headers and refusals of a limited key's answers (rate_limits.py), and the usage
ledger with `GET /v1/usage` (usage.py). The counters themselves are the store's
(store/meter.py)."""
