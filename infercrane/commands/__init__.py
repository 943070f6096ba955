"""CLI command implementations, each loaded only when its command runs."""
