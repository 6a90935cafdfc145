"""gpuplace.adapters.kube."""
