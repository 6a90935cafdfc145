"""Scheduling framework: the policy interface, the placement cycle, filter verdicts and the diagnosis of a pod
that fits nowhere (policies and their registry: `policies`)."""

__all__ = ["diagnosis", "interface", "runtime", "verdicts"]
