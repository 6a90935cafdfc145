"""What moving one running pod costs, in seconds of service put at risk.

    cost_s = MOVE_OVERHEAD_S + restart_s + restart_s * REFERENCE_DEADLINE_MS / deadline_ms
The overhead makes every move count even when a restart is free (an eviction is never free: the pod
loses its warm state, the API server does work). The restart is service lost. The deadline term is
the risk: a pod with a deadline misses every frame while it restarts, and a tighter deadline leaves
less room to catch up afterwards, so its restart weighs more -- an 80 ms pod's restart counts
1 + 100/80 = 2.25 times, a pod without a deadline's once.
"""

from __future__ import annotations

from gpuplace.core.defrag.model import RunningPod

MOVE_OVERHEAD_S = 1.0
REFERENCE_DEADLINE_MS = 100.0


def move_cost_s(running: RunningPod) -> float:
    """Cost of evicting `running` and restarting it elsewhere (see the module docstring)."""
    restart_s = max(0.0, float(running.restart_s))
    risk_s = 0.0
    deadline_ms = running.pod.deadline_ms
    if deadline_ms is not None and deadline_ms > 0:
        risk_s = restart_s * REFERENCE_DEADLINE_MS / float(deadline_ms)
    return MOVE_OVERHEAD_S + restart_s + risk_s


__all__ = ["MOVE_OVERHEAD_S", "REFERENCE_DEADLINE_MS", "move_cost_s"]
