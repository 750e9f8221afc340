"""What the HTTP backends share: the call and its read loop, budgets and retries, the transport
seam and its tap."""
