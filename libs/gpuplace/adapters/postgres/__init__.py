"""gpuplace.adapters.postgres."""
