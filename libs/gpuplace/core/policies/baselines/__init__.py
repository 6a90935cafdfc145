"""gpuplace.core.policies.baselines."""
