"""What the CLI does besides serving: doctor, codex-setup, replay."""
