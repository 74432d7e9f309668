"""Conformance vectors for a second implementation of the device (Kotlin, Swift, ...).

`python -m tools.conformance write conformance/v1` generates a versioned folder of wire frames,
session traces, steering decisions and audit logs, every expected outcome computed by calling the
Python SDK's own functions; `python -m tools.conformance check conformance/v1` replays every vector
through those functions and names each file and vector that no longer agrees. conformance/README.md
describes the files for the implementer of another SDK.
"""
