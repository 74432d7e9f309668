"""Generated stubs of verifier.proto (committed; tests/core/test_wire.py checks they match a fresh protoc run)."""
