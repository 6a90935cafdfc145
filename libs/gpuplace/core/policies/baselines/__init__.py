"""The paper's five baselines (Weng et al., ATC'23, §6.1), one module each, and the node scale three of them
normalise by (scale.py)."""

__all__ = ["best_fit", "dot_prod", "gpu_clustering", "gpu_packing", "random_fit", "scale"]
