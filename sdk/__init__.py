"""SpecSteer device SDK: the on-device Specialist and the Draft-Verify-Recover loop."""
