"""audit package."""
