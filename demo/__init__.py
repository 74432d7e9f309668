"""The demo: `sdk demo` composes the device, a verifier process on loopback, and `audit verify`.

It sits at the top of the layering (docs/architecture.md) and is reached from the `sdk` CLI only
through the `specsteer.sdk_commands` entry point, so the device package holds no cloud code.
"""
