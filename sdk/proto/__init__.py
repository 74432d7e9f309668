"""Generated stubs of verifier.proto (committed; tests/sdk/test_wire.py checks they match a fresh protoc run)."""
