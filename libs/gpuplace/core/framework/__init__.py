"""Scheduling framework: the policy interface and the placement cycle (policies and their registry: `policies`)."""

__all__ = ["interface", "runtime"]
