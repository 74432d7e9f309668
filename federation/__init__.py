"""federation package."""
