"""gpuplace.adapters."""
