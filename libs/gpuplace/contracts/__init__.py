"""gpuplace.contracts."""
