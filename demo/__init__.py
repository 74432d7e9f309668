"""The repository's demo, `python -m demo` (`make demo`): the device, a verifier process on loopback,
and `audit verify`, composed. It sits at the top of the layering (docs/architecture.md) and is no
part of the wheel.
"""
