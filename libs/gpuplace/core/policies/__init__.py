"""Placement policies: FGD, the house policies and wrappers here; the paper's baselines in `baselines`."""

__all__ = ["baselines", "exclusive", "fgd", "gpuplace", "latency_aware"]
