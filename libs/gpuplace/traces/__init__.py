"""gpuplace.traces."""
