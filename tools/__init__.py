"""Maintenance tools run from the repository root (`python -m tools.<name>`); no package imports them."""
