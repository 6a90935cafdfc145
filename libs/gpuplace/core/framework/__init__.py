"""Scheduling framework: the policy interface, the registry of policies, and the placement cycle."""

__all__ = ["default_steps", "interface", "registry", "runtime"]
