"""Programs a team can copy to build on gpuplace's events (each depends on gpuplace.contracts and FastStream only)."""
