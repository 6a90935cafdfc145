"""One GPU's observed state, whichever source it came from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str | None
    model: str | None
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: float
    healthy: bool = True


__all__ = ["GpuSample"]
