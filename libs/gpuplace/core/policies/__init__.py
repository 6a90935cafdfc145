"""gpuplace.core.policies."""
