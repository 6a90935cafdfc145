"""gpuplace.usecases."""
