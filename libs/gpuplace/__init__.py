"""gpuplace: fragmentation-aware, deadline-aware GPU placement for Kubernetes fleets."""

__all__: list[str] = []
