"""The wire formats and their validation. No I/O."""
